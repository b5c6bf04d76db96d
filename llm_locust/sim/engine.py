"""Continuous-batching model of an inference engine: pure, no I/O, no clock of its own.

The engine runs iterations. At the start of one it admits waiting requests (FIFO, strict head of
line) while a batch slot is free and the head request's prompt + max_tokens fits in the free KV
budget; the iteration then lasts

    iter_base + iter_per_seq * batch + iter_per_prefill_token * prefill_tokens

seconds, where batch is the number of running (not paused) sequences, newly admitted ones
included, and prefill_tokens is the prompt length of the requests admitted by this iteration
(less the tokens found in the prefix cache, when there is one). At its end every sequence in the
batch gets one token (with speculative decoding, 1 + the accepted drafts). The caller owns the
clock: `begin()` returns the duration, the caller calls `end()` when that time has passed (a fake
clock in tests, asyncio timers in the server).

These options are off by default, and then nothing here differs from the plain model:
  - preemption (`preempt`): a sequence holds KV for its prompt and the tokens generated so far
    (not its whole max_tokens), admission needs prompt + generated + 1 free; before each
    iteration, while the running sequences' next tokens do not fit, the most recently admitted
    one is preempted (vLLM's recompute policy): its KV freed, back to the head of the queue,
    prefilled again (prompt + generated) when readmitted; no admission in an iteration that
    preempted. Counted in `preemptions`.
  - prefix cache (`prefix_cache_tokens` > 0): a sequence's tokens (any hashable items: the
    server's words) are hashed in chained blocks of `cache_block` (block k's hash covers block
    k-1's, as vLLM's); at admission the longest run of leading full blocks found in an LRU of
    `prefix_cache_tokens // cache_block` blocks is "cached" (at most n_in - 1 tokens, as vLLM
    always computes the last prompt token) and not prefilled; the prompt's blocks enter the
    cache at admission, and the prompt + output's blocks when the sequence finishes.
  - speculative decoding (`spec_tokens` K > 0): every iteration after a sequence's first, it
    drafts min(K, tokens left - 1) tokens; each is accepted with probability `spec_accept`
    (seeded), stopping at the first rejection; the sequence gets 1 + accepted tokens. Counted as
    vLLM does: drafts, draft tokens, accepted tokens (and accepted per position).
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SimConfig:
    slots: int = 8
    kv_tokens: int = 10_000_000
    iter_base: float = 0.005
    iter_per_seq: float = 0.0005
    iter_per_prefill_token: float = 0.00002
    prefix_cache_tokens: int = 0  # 0: no prefix cache
    cache_block: int = 16
    spec_tokens: int = 0  # K draft tokens per iteration; 0: no speculative decoding
    spec_accept: float = 0.0  # probability that one draft token is accepted
    preempt: bool = False  # KV held as used (prompt + generated) and preempted when short; False: reserved up front


def block_hashes(items, block: int, limit: int | None = None) -> list[int]:
    """Chained hashes of the full blocks of items[:limit]: block k's hash covers block k-1's."""
    n = len(items) if limit is None else min(limit, len(items))
    out, h = [], 0
    for k in range(n // block):
        h = hash((h, *items[k * block : (k + 1) * block]))
        out.append(h)
    return out


class PrefixCache:
    """An LRU of block hashes, `tokens // block` blocks; counts queries and hits in tokens."""

    def __init__(self, tokens: int, block: int):
        if block < 1:
            raise ValueError("cache block must be >= 1")
        self.block = block
        self.capacity = tokens // block
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.queries = self.hits = 0

    def lookup(self, items, n_in: int | None = None) -> int:
        """Cached tokens of a prompt (leading full blocks present, within n_in - 1 tokens); counts
        the query (n_in tokens) and the hit; the hit blocks become most recently used."""
        n_in = len(items) if n_in is None else n_in
        hit = 0
        for h in block_hashes(items, self.block, max(0, n_in - 1)):
            if h not in self.lru:
                break
            self.lru.move_to_end(h)
            hit += 1
        self.queries += n_in
        self.hits += hit * self.block
        return hit * self.block

    def insert(self, items) -> None:
        """Every full block of items enters the cache (most recently used); the oldest leave."""
        lru = self.lru
        for h in block_hashes(items, self.block):
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > self.capacity:
            lru.popitem(last=False)

    def admit(self, items, n_in: int | None = None) -> int:
        """lookup, then the prompt's own blocks enter the cache."""
        hit = self.lookup(items, n_in)
        self.insert(items)
        return hit


@dataclass(eq=False)
class Seq:
    n_in: int
    target: int  # tokens it will generate (max_tokens, or fewer on a drawn EOS)
    reserve: int  # KV tokens held from admission to finish: n_in + max_tokens
    owner: Any = None  # the server's stream object
    n_out: int = 0
    paused: bool = False
    state: str = "new"  # new | waiting | running | done
    prompt: list | None = None  # the prompt's tokens (hashable items), for the prefix cache
    output: list | None = None  # the tokens it will generate (at least target of them), ditto
    n_cached: int = 0  # prompt tokens found in the prefix cache at admission
    got: int = 0  # tokens it got in the last iteration (1, or 1 + accepted drafts)
    held: int = 0  # KV tokens it holds now (reserve, or with preemption prompt + generated)


@dataclass(eq=False)
class Engine:
    config: SimConfig
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    kv_used: int = 0
    seed: int = 0  # the speculative acceptance draws
    _batch: list = field(default_factory=list)

    def __post_init__(self):
        cfg = self.config
        self.cache = PrefixCache(cfg.prefix_cache_tokens, cfg.cache_block) if cfg.prefix_cache_tokens > 0 else None
        self.rng = random.Random(self.seed)
        # vLLM's speculative decoding counters
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted = 0
        self.spec_accepted_per_pos = [0] * max(0, cfg.spec_tokens)
        self.preemptions = 0

    def _need(self, seq: Seq) -> int:
        """KV tokens `seq` needs to be admitted."""
        return seq.n_in + seq.n_out + 1 if self.config.preempt else seq.reserve

    def _preempt_for_next_tokens(self) -> bool:
        """Preemption mode: free KV for the running sequences' next tokens, preempting the most
        recently admitted first; True when one was preempted."""
        step = 1 + max(0, self.config.spec_tokens)
        preempted = False
        while len(self.running) > 1:
            active = sum(1 for s in self.running if not s.paused)
            if self.kv_used + active * step <= self.config.kv_tokens:
                break
            victim = self.running.pop()
            self.kv_used -= victim.held
            victim.held = 0
            victim.state = "waiting"
            self.waiting.appendleft(victim)
            self.preemptions += 1
            preempted = True
        return preempted

    def fits_ever(self, seq: Seq) -> bool:
        return seq.reserve <= self.config.kv_tokens

    def submit(self, seq: Seq) -> None:
        if not self.fits_ever(seq):
            raise ValueError("request needs more KV than the whole cache")
        seq.state = "waiting"
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting) or any(not s.paused for s in self.running)

    def begin(self) -> float | None:
        """Admit what fits and plan one iteration; its duration, or None if nothing can run."""
        cfg = self.config
        prefill = 0
        preempted = cfg.preempt and self._preempt_for_next_tokens()
        while self.waiting and len(self.running) < cfg.slots and not preempted:
            head = self.waiting[0]
            if self._need(head) > cfg.kv_tokens - self.kv_used:
                break
            self.waiting.popleft()
            head.state = "running"
            self.running.append(head)
            head.held = head.n_in + head.n_out if cfg.preempt else head.reserve
            self.kv_used += head.held
            if self.cache is not None and head.prompt is not None:
                head.n_cached = self.cache.admit(head.prompt, head.n_in)
            prefill += head.n_in - head.n_cached + head.n_out  # a preempted sequence recomputes its output too
        self._batch = [s for s in self.running if not s.paused]
        if not self._batch:
            return None
        return cfg.iter_base + cfg.iter_per_seq * len(self._batch) + cfg.iter_per_prefill_token * prefill

    def end(self) -> list[Seq]:
        """Finish the planned iteration: one token to each sequence still in the batch."""
        got = []
        k_max = self.config.spec_tokens
        for s in self._batch:
            if s.state != "running":  # cancelled during the iteration
                continue
            n = 1
            if k_max > 0 and s.n_out > 0:  # a decode step: draft, verify, accept a prefix
                k = min(k_max, s.target - s.n_out - 1)
                if k > 0:
                    a, p, rnd = 0, self.config.spec_accept, self.rng.random
                    while a < k and rnd() < p:
                        self.spec_accepted_per_pos[a] += 1
                        a += 1
                    self.spec_drafts += 1
                    self.spec_draft_tokens += k
                    self.spec_accepted += a
                    n += a
            s.got = n
            s.n_out += n
            if self.config.preempt:
                s.held += n
                self.kv_used += n
            got.append(s)
            if s.n_out >= s.target:
                self._release(s)
                if self.cache is not None and s.prompt is not None and s.output is not None:
                    self.cache.insert(list(s.prompt) + list(s.output[: s.n_out]))
        self._batch = []
        return got

    def cancel(self, seq: Seq) -> None:
        if seq.state == "waiting":
            self.waiting.remove(seq)
            seq.state = "done"
        elif seq.state == "running":
            self._release(seq)

    def _release(self, seq: Seq) -> None:
        seq.state = "done"
        self.running.remove(seq)
        self.kv_used -= seq.held
        seq.held = 0

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.config.kv_tokens


def iteration_time(config: SimConfig, batch: int, prefill_tokens: int = 0) -> float:
    return config.iter_base + config.iter_per_seq * batch + config.iter_per_prefill_token * prefill_tokens


def decode_rate(config: SimConfig, n: int) -> float:
    """Output tokens/s of n sequences in pure decode: n / (a + b n)."""
    return n / iteration_time(config, n) if n > 0 else 0.0


def capacity(config: SimConfig, prompt_tokens: int = 0, output_tokens: int | None = None) -> dict:
    """Steady-state figures in closed form (see docs/sim.md).

    prompt_tokens/output_tokens describe a uniform workload; output_tokens=None means pure decode
    (no prefill cost, KV not limiting). "Saturated" means the waiting queue never empties, so a
    finished sequence's slot is refilled by the next iteration.
    """
    a, b, c = config.iter_base, config.iter_per_seq, config.iter_per_prefill_token
    n = config.slots
    if output_tokens is not None:
        n = min(n, config.kv_tokens // (prompt_tokens + output_tokens))
    out = {
        "max_running": n,
        "saturation_concurrency": n,
        "itl_idle_s": a + b,
        "ttft_idle_s": a + b + c * prompt_tokens,
        "decode_iter_s_saturated": a + b * n,
        "decode_tokens_per_s_saturated": decode_rate(config, n),
        "decode_tokens_per_s_limit": 1 / b if b > 0 else float("inf"),
    }
    if output_tokens is not None and n > 0:
        # each request spends exactly output_tokens iterations in the batch, and its prompt is
        # prefilled once: on average n/output_tokens admissions per iteration
        mean_iter = a + b * n + c * prompt_tokens * n / output_tokens
        out.update(
            mean_iter_s_saturated=mean_iter,
            output_tokens_per_s=n / mean_iter,
            requests_per_s=n / mean_iter / output_tokens,
            e2e_idle_s=(a + b + c * prompt_tokens) + (output_tokens - 1) * (a + b),
        )
    return out


def simulate(
    config: SimConfig,
    arrivals: list[tuple[float, int, int]],
    *,
    prompts: list | None = None,
    outputs: list | None = None,
    engine: Engine | None = None,
) -> list[list[float]]:
    """Run the engine on a virtual clock exactly as the server drives it.

    arrivals: (time, n_in, n_out) per request, any order. Returns each request's token times (a
    token per entry: an iteration that gives a sequence several tokens repeats its end time).
    An iteration starts when the previous one ends, or when a request arrives at an idle engine;
    requests arriving mid-iteration wait for the next one. prompts / outputs: each request's
    tokens (for the prefix cache); engine: run on this one (to read its counters afterwards).
    """
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    seqs = [
        Seq(
            n_in=n_in,
            target=n_out,
            reserve=n_in + n_out,
            owner=i,
            prompt=prompts[i] if prompts else None,
            output=outputs[i] if outputs else None,
        )
        for i, (_, n_in, n_out) in enumerate(arrivals)
    ]
    times: list[list[float]] = [[] for _ in arrivals]
    eng = Engine(config) if engine is None else engine
    now, k = 0.0, 0
    while k < len(order) or eng.has_work():
        while k < len(order) and arrivals[order[k]][0] <= now:
            eng.submit(seqs[order[k]])
            k += 1
        dur = eng.begin()
        if dur is None:  # idle: jump to the next arrival
            now = arrivals[order[k]][0]
            continue
        now += dur
        for s in eng.end():
            times[s.owner].extend([now] * s.got)
    return times

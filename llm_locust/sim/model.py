"""Continuous-batching model of an inference engine: pure, no I/O, no clock of its own.

The engine runs iterations. At the start of one it admits waiting requests (FIFO, strict head of
line) while a batch slot is free and the head request's prompt + max_tokens fits in the free KV
budget; the iteration then lasts

    iter_base + iter_per_seq * batch + iter_per_prefill_token * prefill_tokens

seconds, where batch is the number of running (not paused) sequences, newly admitted ones
included, and prefill_tokens is the prompt length of the requests admitted by this iteration. At
its end every sequence in the batch gets one token. The caller owns the clock: `begin()` returns
the duration, the caller calls `end()` when that time has passed (a fake clock in tests, asyncio
timers in the server).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SimConfig:
    slots: int = 8
    kv_tokens: int = 10_000_000
    iter_base: float = 0.005
    iter_per_seq: float = 0.0005
    iter_per_prefill_token: float = 0.00002


@dataclass(eq=False)
class Seq:
    n_in: int
    target: int  # tokens it will generate (max_tokens, or fewer on a drawn EOS)
    reserve: int  # KV tokens held from admission to finish: n_in + max_tokens
    owner: Any = None  # the server's stream object
    n_out: int = 0
    paused: bool = False
    state: str = "new"  # new | waiting | running | done


@dataclass(eq=False)
class Engine:
    config: SimConfig
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    kv_used: int = 0
    _batch: list = field(default_factory=list)

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
        while self.waiting and len(self.running) < cfg.slots:
            head = self.waiting[0]
            if head.reserve > cfg.kv_tokens - self.kv_used:
                break
            self.waiting.popleft()
            head.state = "running"
            self.running.append(head)
            self.kv_used += head.reserve
            prefill += head.n_in
        self._batch = [s for s in self.running if not s.paused]
        if not self._batch:
            return None
        return cfg.iter_base + cfg.iter_per_seq * len(self._batch) + cfg.iter_per_prefill_token * prefill

    def end(self) -> list[Seq]:
        """Finish the planned iteration: one token to each sequence still in the batch."""
        got = []
        for s in self._batch:
            if s.state != "running":  # cancelled during the iteration
                continue
            s.n_out += 1
            got.append(s)
            if s.n_out >= s.target:
                self._release(s)
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
        self.kv_used -= seq.reserve

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


def simulate(config: SimConfig, arrivals: list[tuple[float, int, int]]) -> list[list[float]]:
    """Run the engine on a virtual clock exactly as the server drives it.

    arrivals: (time, n_in, n_out) per request, any order. Returns each request's token times.
    An iteration starts when the previous one ends, or when a request arrives at an idle engine;
    requests arriving mid-iteration wait for the next one.
    """
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    seqs = [Seq(n_in=n_in, target=n_out, reserve=n_in + n_out, owner=i) for i, (_, n_in, n_out) in enumerate(arrivals)]
    times: list[list[float]] = [[] for _ in arrivals]
    eng = Engine(config)
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
            times[s.owner].append(now)
    return times

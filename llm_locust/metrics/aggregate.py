"""Request records -> mergeable figures. Knows nothing of HTTP or Locust.

An `Aggregate` is what one worker saw (or, merged, what the cluster saw) over some window:
latency histograms, counters by outcome, token counts and per-second series. Every part of it
merges exactly: histograms add bucket counts, counters add, series add per second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from llm_locust.metrics.blocks import Blocks
from llm_locust.metrics.flow import LATE_S, Flow
from llm_locust.metrics.gaps import gap_samples
from llm_locust.metrics.histogram import HIGHEST_US, PERCENTILES, Histogram, latency_stats
from llm_locust.metrics.records import FAILURE_KINDS, OUTCOMES, SOURCE_REJECTED, Outcome, RequestRecord, WorkFacts
from llm_locust.metrics.timeseries import LatencySeries, Seconds
from llm_locust.schema import (
    Accuracy,
    ClientCancel,
    ClientCheck,
    ClientFigures,
    Figures,
    HeadlineFigures,
    Latency,
    LatencyStats,
    Phases,
)
from llm_locust.schema import CacheCounts as CacheDoc

# Outcomes that are not a failure of the server: in flight at the stop, or ended by the client
# (--cancel); they are counted apart and left out of the error rate's answered requests
NOT_FAILED = (Outcome.CANCELLED.value, Outcome.CLIENT_CANCELLED.value)

# Histograms of per-request (or per-token) latencies, in seconds. See docs/metrics.md.
LATENCIES = (
    "ttft",  # t_first - t_sent
    "ttft_content",  # t_first_content - t_sent (differs from ttft for reasoning models)
    "ttft_tool",  # t_first_tool - t_sent: first generated tool-call token (requests that called a tool)
    "ttft_queue",  # t_first - t_sched
    "schedule_lag",  # t_sent - t_sched
    "itl",  # per token: gap_k / n_k, n_k samples
    "inter_chunk",  # per chunk: gap_k
    "tpot",  # per request: (t_last - t_first) / (N_out - 1)
    "e2e",  # t_end - t_sent
    "e2e_queue",  # t_end - t_sched
)
# client validity: how late the worker's event loop wakes, and how late it sent a request once it
# was due and free to go (t_sent - max(t_sched, t_released): a send held at --max-in-flight or
# --max-prefill waited by design, which is the server's queue, not the client's lateness)
CLIENT_LATENCIES = ("loop_lag", "send_delay")
# TTFT of ok requests whose server reported its cached prompt tokens, split at CACHE_HIT_SHARE:
# a hit when n_cached >= CACHE_HIT_SHARE * n_in, else a miss (docs/metrics.md, "Prompt cache")
CACHE_LATENCIES = ("ttft_cache_hit", "ttft_cache_miss")
CACHE_HIT_SHARE = 0.5
# Request phases of ok requests with a first token (RequestRecord.phases; docs/metrics.md,
# "Request phases"): send + wait + first_token = TTFT; + receive = E2E; connect comes before t_sent
# (0 on a kept-alive connection). Histogram "phase_<name>"; "phase_connect_new": the connect of
# the requests that opened their connection.
PHASES = ("connect", "send", "wait", "first_token", "receive")
PHASE_LATENCIES = (*(f"phase_{p}" for p in PHASES), "phase_connect_new")
# figures per endpoint and per model (docs/metrics.md, "Per endpoint and per model"): at most
# MAX_GROUPS distinct values each, the values past the cap pooled under OTHER_GROUP
GROUP_DIMENSIONS = ("endpoint", "model")
MAX_GROUPS = 64
OTHER_GROUP = "other"
GROUP_LATENCIES = ("ttft", "tpot", "e2e")
SLO_METRICS = ("ttft", "ttft_queue", "tpot", "e2e", "e2e_queue", "itl_max")
MAX_ERROR_TEXTS = 10  # distinct error texts kept per failure kind


# Request kinds whose replies are one JSON body, not a token stream (protocols.JSON_API_NAMES):
# latency is their E2E; they have no TTFT, ITL or TPOT and no output tokens.
KIND_APIS = frozenset({"openai-embeddings", "rerank", "vllm-score"})


class NamedCounts:
    """A part of an Aggregate made of counters named by its __slots__: it travels between processes
    by name (those that are not 0) and merges by adding each by name (wire_problem has refused
    names the part does not know)."""

    __slots__: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """Its counts by name, those that are not 0."""
        return {name: n for name in self.__slots__ if (n := getattr(self, name))}

    def merge_wire(self, counts: dict[str, Any]) -> None:
        for name, n in counts.items():
            setattr(self, name, getattr(self, name) + n)


class KindFigures:
    """One non-generation request kind: ok, failed, items (embeddings returned, documents
    scored), input tokens and latency."""

    __slots__ = ("ok", "failed", "items", "tokens_in", "latency")
    COUNTS = ("ok", "failed", "items", "tokens_in")

    def __init__(self) -> None:
        self.ok = self.failed = self.items = self.tokens_in = 0
        self.latency = Histogram()

    def to_wire(self) -> dict[str, Any]:
        """Its counts by name (those that are not 0), and its latency histogram as `latency`:
        [encoded, exact sum in us]."""
        wire: dict[str, Any] = {name: n for name in self.COUNTS if (n := getattr(self, name))}
        wire["latency"] = [self.latency.encode(), self.latency.sum_us]
        return wire

    def merge_wire(self, wire: dict[str, Any]) -> None:
        for name, value in wire.items():
            if name == "latency":
                self.latency.merge_encoded(*value)
            else:
                setattr(self, name, getattr(self, name) + value)


class CacheCounts(NamedCounts):
    """Prompt-cache reuse over ok requests (docs/metrics.md, "Prompt cache"): counters only, so
    merging adds them. `reported`: requests whose server said how many prompt tokens it served
    from its cache (`cached` their sum, `prompt` their prompt tokens); `ideal_n`: requests whose
    ideal is known (`ideal` its sum, `ideal_prompt` their prompt tokens); `both_n`: requests with
    both (`both_cached`, `both_ideal`: the two sums over them); `hits` / `misses`: reported
    requests at / below the hit threshold."""

    __slots__ = (
        "reported",
        "cached",
        "prompt",
        "ideal_n",
        "ideal",
        "ideal_prompt",
        "both_n",
        "both_cached",
        "both_ideal",
        "hits",
        "misses",
    )

    def __init__(self) -> None:
        self.reported = self.cached = self.prompt = 0
        self.ideal_n = self.ideal = self.ideal_prompt = 0
        self.both_n = self.both_cached = self.both_ideal = 0
        self.hits = self.misses = 0

    def add(self, n_cached: int | None, ideal: int | None, n_in: int | None) -> bool | None:
        """Count one ok request; True for a hit, False for a miss, None when neither is known."""
        prompt = n_in or 0
        hit = None
        if n_cached is not None:
            self.reported += 1
            self.cached += n_cached
            self.prompt += prompt
            if prompt > 0:
                hit = n_cached >= CACHE_HIT_SHARE * prompt
                if hit:
                    self.hits += 1
                else:
                    self.misses += 1
        if ideal is not None:
            self.ideal_n += 1
            self.ideal += ideal
            self.ideal_prompt += prompt
            if n_cached is not None:
                self.both_n += 1
                self.both_cached += n_cached
                self.both_ideal += ideal
        return hit

    @property
    def any(self) -> bool:
        return bool(self.reported or self.ideal_n)

    def figures(self) -> CacheDoc:
        return {
            "requests_reported": self.reported,
            "cached_tokens": self.cached,
            "prompt_tokens": self.prompt,
            "hit_ratio": self.cached / self.prompt if self.prompt else None,
            "ideal_requests": self.ideal_n,
            "ideal_cached_tokens": self.ideal,
            "ideal_prompt_tokens": self.ideal_prompt,
            "ideal_hit_ratio": self.ideal / self.ideal_prompt if self.ideal_prompt else None,
            "both_requests": self.both_n,
            "achieved_vs_ideal": self.both_cached / self.both_ideal if self.both_ideal else None,
            "hit_requests": self.hits,
            "miss_requests": self.misses,
        }


class SparseHistogram:
    """A latency histogram kept as {bucket: count}, with the HDR histogram's buckets (3
    significant digits: values below 2048 us exact, above that the top 11 bits kept) and an
    exact sum: the per-endpoint and per-model figures use it, since a full HDR histogram's
    counts array (~190 KB) per group would make the group cap cost too much memory. Merging
    adds counts; percentiles are the HDR histogram's (highest value of the bucket that reaches
    the target count)."""

    __slots__ = ("buckets", "sum_us")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.sum_us = 0

    def record(self, seconds: float, count: int = 1) -> None:
        us = round(seconds * 1e6)
        if us < 0:
            us = 0
        elif us > HIGHEST_US:
            us = HIGHEST_US
        self.sum_us += us * count
        if us >= 2048:
            shift = us.bit_length() - 11
            us = (us >> shift) << shift
        b = self.buckets
        b[us] = b.get(us, 0) + count

    @property
    def count(self) -> int:
        return sum(self.buckets.values())

    def to_wire(self) -> list[Any]:
        """[exact sum in us, [bucket, count, bucket, count, ...]]"""
        return [self.sum_us, [x for kv in self.buckets.items() for x in kv]]

    def merge_wire(self, wire: list[Any] | None) -> None:
        if not wire:
            return
        sum_us, flat = wire
        self.sum_us += sum_us
        b = self.buckets
        for i in range(0, len(flat), 2):
            b[flat[i]] = b.get(flat[i], 0) + flat[i + 1]

    def summary(self) -> LatencyStats:
        n = self.count
        if not n:
            return {"count": 0}
        keys = sorted(self.buckets)
        pct: dict[str, float] = {}
        targets = [(f"p{p:g}", max(int(p * n / 100 + 0.5), 1)) for p in PERCENTILES]
        acc, t = 0, 0
        for k in keys:
            acc += self.buckets[k]
            while t < len(targets) and acc >= targets[t][1]:
                pct[targets[t][0]] = _highest(k) / 1e6
                t += 1
        return latency_stats(n, self.sum_us / n / 1e6, keys[0] / 1e6, _highest(keys[-1]) / 1e6, pct)


def _highest(us: int) -> int:
    """The highest value of the bucket whose lowest value is `us` (HDR's highest equivalent)."""
    return us if us < 2048 else us + (1 << (us.bit_length() - 11)) - 1


def window_span(agg: Aggregate) -> float:
    """The window's seconds: from its first request sent to its last one ended (0.0 before one
    ended). The summary's duration_s and the live view's, and what every whole-window rate is over."""
    return (agg.last_end - agg.first_sent) if agg.first_sent is not None and agg.last_end is not None else 0.0


def per_s(n: float, span: float) -> float:
    """`n` a second over the window's `span`; 0.0 over no span."""
    return n / span if span > 0 else 0.0


class Totals(HeadlineFigures):
    """The counts and whole-window rates that the summary (`figures`) and the live view
    (report/live.py, "totals") both show, computed once by `totals`."""

    sent: int
    finished: int
    ok: int
    failed: int
    cancelled: int
    client_cancelled: int
    duration_s: float
    tokens_in: int
    tokens_out: int
    goodput_requests_per_s: float
    goodput_tokens_per_s: float
    length_checked: int
    length_mismatch: int


def totals(agg: Aggregate) -> Totals:
    """The window's counts and rates over its span (`window_span`): one formula for each, read by
    the summary and by the live view, so that the two cannot drift apart."""
    span = window_span(agg)
    finished = agg.finished
    client = agg.outcomes[Outcome.CLIENT_CANCELLED.value]
    ok = agg.outcomes.get(Outcome.OK.value, 0)
    return {
        "sent": agg.sent,
        "finished": finished,
        "ok": ok,
        "failed": agg.failed,
        "cancelled": agg.cancelled,
        "client_cancelled": client,
        "error_rate": error_rate(agg.failed, finished, agg.cancelled, client),
        "duration_s": span,
        "tokens_in": agg.tokens_in,
        "tokens_out": agg.tokens_out,
        "output_tokens_per_s": per_s(agg.tokens_out, span),
        "requests_per_s": per_s(ok, span),
        "goodput_requests_per_s": per_s(agg.goodput_requests, span),
        "goodput_tokens_per_s": per_s(agg.goodput_tokens, span),
        "concurrency": per_s(agg.sum_e2e, span),
        "length_checked": agg.length_checked,
        "length_mismatch": agg.length_mismatch,
    }


def latency_figures(agg: Aggregate, names: tuple[str, ...] = LATENCIES) -> Latency:
    """The summaries of the latencies `names` (seconds): the summary's `latency`, the live view's."""
    return {k: agg.hist[k].summary() for k in names}


def error_rate(failed: int, finished: int, cancelled: int, client_cancelled: int) -> float:
    """The share of answered requests that failed: cancelled ones (by the stop, or by --cancel) were
    never answered, so they are in neither part. 0.0 when none was answered. One formula for the
    summary, each group's row and the live view, so they cannot drift apart."""
    answered = finished - cancelled - client_cancelled
    return failed / answered if answered > 0 else 0.0


class GroupFigures:
    """The figures of one endpoint or one model: requests by outcome, tokens, prompt-cache counts
    and TTFT / TPOT / E2E, over the requests that finished in the window."""

    __slots__ = ("outcomes", "tokens_in", "tokens_out", "cache", "hist", "blocks")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.tokens_in = self.tokens_out = 0
        self.cache = CacheCounts()
        self.hist = {name: SparseHistogram() for name in GROUP_LATENCIES}
        self.blocks = Blocks()  # the group's ok requests by time block: its 95% intervals

    def add(self, rec: RequestRecord, t_end: float) -> None:
        o = rec.outcome.value
        self.outcomes[o] = self.outcomes.get(o, 0) + 1
        wall_end = t_end + rec.wall_sent - rec.t_sent
        if not rec.ok and rec.outcome not in NOT_FAILED:
            self.blocks.add_failed(wall_end)
        elif rec.ok and rec.api in KIND_APIS:
            self.blocks.add_answered(wall_end)
        elif rec.outcome is Outcome.CANCELLED and rec.api not in KIND_APIS:
            self.blocks.add_life(wall_end, rec.wall_sent, wall_end, rec.n_out, "cut")
        if not rec.ok or rec.api in KIND_APIS:
            return
        self.tokens_out += rec.n_out
        if rec.n_in is not None:
            self.tokens_in += rec.n_in
        if rec.n_cached is not None or rec.ideal_cached is not None:
            self.cache.add(rec.n_cached, rec.ideal_cached, rec.n_in)
        h = self.hist
        h["e2e"].record(t_end - rec.t_sent)
        lat = {"e2e": max(round((t_end - rec.t_sent) * 1e6), 0)}
        if rec.t_first is not None:
            h["ttft"].record(rec.t_first - rec.t_sent)
            lat["ttft"] = max(round((rec.t_first - rec.t_sent) * 1e6), 0)
            if rec.n_out >= 2 and rec.chunk_times:
                h["tpot"].record((rec.chunk_times[-1] - rec.t_first) / (rec.n_out - 1))
                lat["tpot"] = max(round((rec.chunk_times[-1] - rec.t_first) / (rec.n_out - 1) * 1e6), 0)
        self.blocks.add_ok(wall_end, lat, rec.n_out, False)
        self.blocks.add_life(wall_end, rec.wall_sent, wall_end, rec.n_out, "ok")

    def to_wire(self) -> dict[str, Any]:
        """Its parts by name (__slots__); the token counts only when not 0."""
        wire: dict[str, Any] = {"outcomes": self.outcomes, "cache": self.cache.to_wire()}
        if self.tokens_in:
            wire["tokens_in"] = self.tokens_in
        if self.tokens_out:
            wire["tokens_out"] = self.tokens_out
        wire["hist"] = {k: h.to_wire() for k, h in self.hist.items() if h.buckets}
        if self.blocks.blocks:
            wire["blocks"] = self.blocks.to_wire()
        return wire

    def merge_wire(self, wire: dict[str, Any]) -> None:
        for o, n in wire["outcomes"].items():
            self.outcomes[o] = self.outcomes.get(o, 0) + n
        self.tokens_in += wire.get("tokens_in", 0)
        self.tokens_out += wire.get("tokens_out", 0)
        self.cache.merge_wire(wire["cache"])
        for k, w in wire["hist"].items():
            if k in self.hist:
                self.hist[k].merge_wire(w)
        self.blocks.merge_wire(wire.get("blocks"))

    def figures(self, span: float, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        """The group's figures over the window's span; with the window's start and end (wall
        clock), the 95% intervals of its latencies and rates (no ITL and no goodput: a group
        keeps neither)."""
        finished = sum(self.outcomes.values())
        ok = self.outcomes.get(Outcome.OK.value, 0)
        cancelled = self.outcomes.get(Outcome.CANCELLED.value, 0)
        client = self.outcomes.get(Outcome.CLIENT_CANCELLED.value, 0)
        failed = finished - ok - cancelled - client
        out: dict[str, Any] = {
            "finished": finished,
            "ok": ok,
            "failed": failed,
            "cancelled": cancelled,
            "client_cancelled": client,
            "failures": {
                k: v for k, v in sorted(self.outcomes.items()) if v and k != Outcome.OK.value and k not in NOT_FAILED
            },
            "error_rate": error_rate(failed, finished, cancelled, client),
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "requests_per_s": per_s(ok, span),
            "output_tokens_per_s": per_s(self.tokens_out, span),
            "latency": {k: h.summary() for k, h in self.hist.items()},
        }
        if self.cache.any:
            out["cache"] = self.cache.figures()
        intervals = self.blocks.intervals(start, end)
        if intervals is not None:
            intervals["latency"].pop("itl", None)
            intervals["method"].pop("itl_percentile", None)
            intervals["rates"] = {k: v for k, v in intervals["rates"].items() if not k.startswith("goodput")}
            out["intervals"] = intervals
        return out


def _group(groups: dict[str, GroupFigures], key: str) -> GroupFigures:
    """The group of `key`, or of OTHER_GROUP once MAX_GROUPS distinct values are kept."""
    g = groups.get(key)
    if g is None:
        if len(groups) >= MAX_GROUPS - (OTHER_GROUP not in groups):
            key = OTHER_GROUP
            g = groups.get(key)
        if g is None:
            g = groups[key] = GroupFigures()
    return g


class WorkloadCounts(NamedCounts):
    """The workload's facts of finished requests (RequestRecord.work), summed: media sent (before
    base64), the structured-output check (--response-format), graded answers (--graded) and the
    overlong mix (--overlong-share). A part of an Aggregate, with its own add and merge."""

    __slots__ = (
        "images",
        "image_bytes",
        "audio",
        "audio_bytes",
        "structured_checked",
        "structured_parsed",
        "structured_valid",
        "graded",
        "correct",
        "overlong_finished",
        "overlong_ok",
        "overlong_refused",
        "cancel_drawn",
        "cancel_ended_first",
    )

    def __init__(self) -> None:
        self.images = 0
        self.image_bytes = 0
        self.audio = 0
        self.audio_bytes = 0
        self.structured_checked = 0  # ok chat replies checked against --response-format
        self.structured_parsed = 0  # ... that parsed as JSON
        self.structured_valid = 0  # ... that met its schema
        self.graded = 0  # ok requests of graded items
        self.correct = 0  # ... answered right
        self.overlong_finished = 0
        self.overlong_ok = 0
        self.overlong_refused = 0  # failed with cause overlong
        self.cancel_drawn = 0  # requests the client drew a cancellation for (--cancel)
        self.cancel_ended_first = 0  # ... that ended (ok or failed) before their cancel time came

    def add(self, rec: RequestRecord, work: WorkFacts) -> None:
        self.images += work.images
        self.image_bytes += work.image_bytes
        self.audio += work.audio
        self.audio_bytes += work.audio_bytes
        if work.overlong and rec.outcome not in NOT_FAILED:  # stopped in flight: no answer to judge
            self.overlong_finished += 1
            self.overlong_ok += rec.ok
            self.overlong_refused += rec.cause == "overlong"
        if work.json_parsed is not None:
            self.structured_checked += 1
            self.structured_parsed += work.json_parsed
            self.structured_valid += bool(work.json_valid)
        if work.graded is not None:  # set only on ok requests (workload.graded)
            self.graded += 1
            self.correct += work.graded
        if work.cancel_drawn:
            self.cancel_drawn += 1
            self.cancel_ended_first += rec.outcome not in NOT_FAILED  # answered (ok or failed) first

    @property
    def overlong(self) -> list[int]:
        """The overlong mix: [finished, ok (served), failed with cause overlong] (analysis.stability)."""
        return [self.overlong_finished, self.overlong_ok, self.overlong_refused]


class ClientCounts(NamedCounts):
    """What the client-validity checks count (client_checks; docs/metrics.md, "Client validity"):
    the token gaps of paced streams and, of them, the gaps of 0 (two token events stamped with one
    read's time); their requests and, of them, those whose first token was read with the second; ok
    requests whose reads all had the kernel's receive time (RequestRecord.clock); and the CPU
    samples (how many, how many at or above the limit, the highest). A part of an Aggregate, with
    its own add and merge: counts add, the highest CPU sample is the highest of both."""

    __slots__ = (
        "paced_gaps",
        "gaps_together",
        "paced_requests",
        "first_together",
        "first_waited",
        "kernel_clock",
        "cpu_samples",
        "cpu_high",
        "cpu_max",
    )

    def __init__(self) -> None:
        self.paced_gaps = 0
        self.gaps_together = 0
        self.paced_requests = 0
        self.first_together = 0
        self.first_waited = 0  # of first_together: in a read whose newest data had waited over WAITED_LONG
        self.kernel_clock = 0
        self.cpu_samples = 0
        self.cpu_high = 0  # samples at or above the limit (reported; not judged)
        self.cpu_max = 0.0

    def add_reads(
        self, times: list[float], gap_counts: dict[int, int], kernel: bool, first_wait: float | None = None
    ) -> None:
        """One ok request's reads: its chunk times, its inter-chunk gap counts by microsecond
        (gap_samples), whether every read had the kernel's receive time, and how long the newest
        data of the read that brought its first token had waited (RequestRecord.first_wait). A stream is paced
        when its tokens came at least PACED_GAP apart on average (a server writing every token at
        once is not: its gaps of 0 say nothing of the client)."""
        n_gaps = len(times) - 1
        if n_gaps > 0 and times[-1] - times[0] >= n_gaps * PACED_GAP:
            self.paced_gaps += n_gaps
            self.gaps_together += gap_counts.get(0, 0)
            self.paced_requests += 1
            if times[1] == times[0]:
                self.first_together += 1
                self.first_waited += first_wait is not None and first_wait > WAITED_LONG
        if kernel:
            self.kernel_clock += 1

    def add_cpu_sample(self, percent: float, threshold: float) -> None:
        self.cpu_samples += 1
        self.cpu_max = max(self.cpu_max, percent)
        if percent >= threshold:
            self.cpu_high += 1

    def merge_wire(self, counts: dict[str, Any]) -> None:
        """Counts add; the highest CPU sample is the higher of both, not a sum."""
        cpu_max = counts.get("cpu_max")
        super().merge_wire({k: n for k, n in counts.items() if k != "cpu_max"})
        if cpu_max is not None:
            self.cpu_max = max(self.cpu_max, cpu_max)


class ConnectionCounts(NamedCounts):
    """The ok requests timed in phases by their connection: opened for them (`new`) or kept alive
    from an earlier request (`kept`). A part of an Aggregate, with its own merge."""

    __slots__ = ("new", "kept")

    def __init__(self) -> None:
        self.new = 0
        self.kept = 0


# The aggregate between processes (a worker's report, a master's merge): every part by name, in
# one version. A report of another version (a worker of another llm-locust) is refused whole.
MAX_SESSIONS = 10_000  # sessions tallied per Aggregate (the agents verdict's per-session figures)
MAX_SESSION_TTFTS = 256  # TTFTs kept per session (its median's sample)
# 5: `flow` and `sent_blocks` (the steady window, analysis/steady.py); 6: blocks count failures;
# 7: blocks spread each request's work over its life (the rates' intervals, metrics/blocks.py)
WIRE_VERSION = 7
# Its plain counters, summed by name (to_wire sends those that are not 0).
COUNTERS = (
    "sent",
    "tokens_in",
    "tokens_out",
    "tokens_out_failed",
    "length_checked",
    "length_mismatch",
    "goodput_requests",
    "goodput_tokens",
    "lost",
    "workers_lost",
)


class WireError(ValueError):
    """Figures from another process that this version cannot read (merge_wire)."""


def wire_problem(wire: Any) -> str | None:
    """Why a to_wire dict from another process cannot be merged (None: it can): another wire
    version, or names in a part read by name (counters, the workload's, the client's, the
    connections', the prompt cache's, a request kind's or a group's) that this version does not
    know: read wrong, they would be figures lost or misplaced."""
    if not isinstance(wire, dict) or wire.get("v") != WIRE_VERSION:
        version = wire.get("v") if isinstance(wire, dict) else None
        return f"figures in wire version {version!r}, where this llm-locust reads {WIRE_VERSION}"
    unknown = _unknown_names(wire)
    if unknown:
        return f"figures with names this llm-locust does not know: {', '.join(sorted(unknown))}"
    return None


def _unknown_names(wire: dict[str, Any]) -> set[str]:
    """The names in a to_wire dict's by-name parts that this version does not know."""
    parts: list[tuple[Any, tuple[str, ...]]] = [
        (wire.get("counters"), COUNTERS),
        (wire.get("work"), WorkloadCounts.__slots__),
        (wire.get("client"), ClientCounts.__slots__),
        (wire.get("connections"), ConnectionCounts.__slots__),
        (wire.get("cache"), CacheCounts.__slots__),
    ]
    parts += [(kind, KindFigures.__slots__) for kind in (wire.get("kinds") or {}).values()]
    for groups in (wire.get("groups") or {}).values():
        for group in groups.values():
            parts += [(group, GroupFigures.__slots__), (group.get("cache"), CacheCounts.__slots__)]
    return {name for names, known in parts for name in names or () if name not in known}


def wire_sent(wire: dict[str, Any]) -> int:
    """The requests a to_wire dict says were sent."""
    return int(wire["counters"].get("sent", 0))


class Aggregate:
    def __init__(self) -> None:
        self.hist: dict[str, Histogram] = {
            name: Histogram() for name in LATENCIES + CLIENT_LATENCIES + CACHE_LATENCIES + PHASE_LATENCIES
        }
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.errors: dict[str, dict[str, int]] = {}
        self.causes: dict[str, int] = {}  # failures by cause (protocols.causes), beside failures by kind
        self.sent = 0
        self.tokens_in = 0
        self.tokens_out = 0  # output tokens of requests that ended ok
        self.tokens_out_failed = 0  # partial output of failed requests
        self.n_out_sources: dict[str, int] = {}
        self.n_in_sources: dict[str, int] = {}
        self.length_checked = 0
        self.length_mismatch = 0
        self.goodput_requests = 0
        self.goodput_tokens = 0
        self.sum_e2e = 0.0
        self.first_sent: float | None = None  # wall clock, over finished requests
        self.last_end: float | None = None
        # wall second -> [tokens arrived, requests ok, requests failed]; seconds older than 6 h
        # folded into wider rows (metrics/timeseries.py Seconds: memory bounded whatever the length)
        self.series: Seconds = Seconds()
        self.by_sent = LatencySeries()  # TTFT and ITL by send second (stability verdicts)
        self.blocks = Blocks()  # ok requests by time block of their end (confidence intervals)
        # the steady window (analysis/steady.py): requests in flight and late sends by the second,
        # and the ok requests by time block of their send (the window's figures)
        self.flow = Flow()
        self.sent_blocks = Blocks()
        # [wall clock sent, cached prompt tokens] of the first-sent ok request whose server said
        # its cached tokens: a cache that served the run's first request held it from before
        # (the run's cache state, analysis.load_facts)
        self.first_cached: list[float] | None = None
        self.client = ClientCounts()  # what the client-validity checks count (client_checks)
        # per session (RequestRecord.session): [ok, failed, tokens after the first, seconds first
        # to last token, TTFTs...] (analysis/agents.py: the agents-under-a-tier verdict)
        self.sessions: dict[str, list[float]] = {}
        self.connections = ConnectionCounts()  # ok requests timed in phases, by their connection
        # requests a lost worker had in flight at its last report (or a worker that never sent its
        # final report): sent, but their outcome never reached the master. Master side only.
        self.lost = 0
        self.workers_lost = 0
        # request kinds that are not token streams (embeddings, rerank, score): their own figures,
        # kept out of the generation latencies and token counts; by API name
        self.kinds: dict[str, KindFigures] = {}
        self.work = WorkloadCounts()  # the workload's facts (RequestRecord.work), summed
        # prompt-cache reuse (ok requests) and the figures per endpoint / per model
        self.cache = CacheCounts()
        self.groups: dict[str, dict[str, GroupFigures]] = {d: {} for d in GROUP_DIMENSIONS}

    # ---- recording (worker side) ----

    def add_sent(self, n: int = 1) -> None:
        self.sent += n

    def add(self, rec: RequestRecord, slos: dict[str, float] | None = None, gaps: tuple | None = None) -> tuple | None:
        """Fold one finished request in. Failed requests count, but stay out of latencies.

        Returns the request's gap samples (gap_samples), or None when it has none; pass them as
        `gaps` when adding the same request to another Aggregate, to fold its gaps only once.
        """
        self.outcomes[rec.outcome.value] += 1
        if rec.session is not None and rec.api not in KIND_APIS:
            self._add_session(rec)
        t_end = rec.t_end if rec.t_end is not None else rec.t_sent
        offset = rec.wall_sent - rec.t_sent  # perf_counter -> wall clock for this request
        self._add_timeline(rec, t_end, offset)
        if rec.endpoint is not None:
            _group(self.groups["endpoint"], rec.endpoint).add(rec, t_end)
        if rec.model is not None:
            _group(self.groups["model"], rec.model).add(rec, t_end)
        if rec.work is not None:
            self.work.add(rec, rec.work)
        if rec.api in KIND_APIS:
            self._add_kind(rec, t_end)
            if rec.ok:
                self.blocks.add_answered(t_end + offset)
                return None
        if not rec.ok:
            self._add_failed(rec)
            if rec.outcome not in NOT_FAILED:  # the error rate's interval (metrics/blocks.py)
                self.blocks.add_failed(t_end + offset)
            elif rec.outcome is Outcome.CANCELLED:  # cut at the stop: the rates' intervals
                self.blocks.add_life(t_end + offset, rec.wall_sent, t_end + offset, rec.n_out, "cut")
                self.sent_blocks.add_life(rec.wall_sent, rec.wall_sent, t_end + offset, rec.n_out, "cut")
            return None
        self._add_counts(rec)
        itl_max = 0.0
        if rec.t_first is not None:
            if gaps is None:
                gaps = gap_samples(rec.chunk_times, rec.chunk_tokens)
            itl_max = self._add_latencies(rec, t_end, offset, gaps)
        else:
            self._add_ends(rec, t_end, None)
        good = _meets(rec, slos, itl_max) if slos else False
        if good:
            self.goodput_requests += 1
            self.goodput_tokens += rec.n_out
        self._add_block(rec, t_end, offset, gaps, good)
        return gaps

    def _add_session(self, rec: RequestRecord) -> None:
        """The request into its session's tally (sessions); the client's own cancellations and a
        stop's are neither ok nor failed. At most MAX_SESSIONS sessions, MAX_SESSION_TTFTS TTFTs each."""
        if rec.outcome in (Outcome.CANCELLED, Outcome.CLIENT_CANCELLED):
            return  # a session with only these is not judged: nothing was answered or refused
        t = self.sessions.get(rec.session or "")
        if t is None:
            if len(self.sessions) >= MAX_SESSIONS:
                return
            t = self.sessions[rec.session or ""] = [0, 0, 0, 0.0]
        if not rec.ok:
            t[1] += 1
            return
        t[0] += 1
        if rec.t_first is not None and rec.n_out >= 2 and rec.chunk_times and rec.chunk_times[-1] > rec.t_first:
            t[2] += rec.n_out - 1
            t[3] += rec.chunk_times[-1] - rec.t_first
        if rec.t_first is not None and len(t) < 4 + MAX_SESSION_TTFTS:
            t.append(rec.t_first - rec.t_sent)

    def _add_block(self, rec: RequestRecord, t_end: float, offset: float, gaps: tuple | None, good: bool) -> None:
        """An ok request into the time block of its end (metrics/blocks.py), in whole us as the
        histograms round them."""
        wall_end = t_end + offset
        lat = {"e2e": max(round((t_end - rec.t_sent) * 1e6), 0)}
        t_first = rec.t_first
        if t_first is not None:
            lat["ttft"] = max(round((t_first - rec.t_sent) * 1e6), 0)
            if rec.n_out >= 2:
                lat["tpot"] = max(round((rec.chunk_times[-1] - t_first) / (rec.n_out - 1) * 1e6), 0)
            if gaps is not None:
                self.blocks.add_itl(wall_end, gaps[2], gaps[3])
        self.blocks.add_ok(wall_end, lat, rec.n_out, good)
        kind: Literal["ok", "good"] = "good" if good else "ok"
        self.blocks.add_life(wall_end, rec.wall_sent, wall_end, rec.n_out, kind)
        if gaps is not None and t_first is not None:
            self.sent_blocks.add_itl(rec.wall_sent, gaps[2], gaps[3])
        self.sent_blocks.add_ok(rec.wall_sent, lat, rec.n_out, good)
        self.sent_blocks.add_life(rec.wall_sent, rec.wall_sent, wall_end, rec.n_out, kind)

    def _add_timeline(self, rec: RequestRecord, t_end: float, offset: float) -> None:
        """The run's first send and last end, and the per-second series: the request's end
        (ok or failed) and its tokens by arrival second (most requests fall within one second;
        else run-length)."""
        wall_end = t_end + offset
        if self.first_sent is None or rec.wall_sent < self.first_sent:
            self.first_sent = rec.wall_sent
        if self.last_end is None or wall_end > self.last_end:
            self.last_end = wall_end
        self.sum_e2e += t_end - rec.t_sent
        self.flow.add(rec.wall_sent, wall_end, rec.t_sent - rec.t_sched > LATE_S)
        series = self.series
        end_bucket = series.bucket(int(wall_end))
        if rec.ok:
            end_bucket[1] += 1
        elif rec.outcome not in NOT_FAILED:  # cancelled at stop or by the client: not the server's failure
            end_bucket[2] += 1
        times, ntoks = rec.chunk_times, rec.chunk_tokens
        if not times:
            return
        first_sec = int(times[0] + offset)
        if first_sec == int(times[-1] + offset):
            series.bucket(first_sec)[0] += sum(ntoks)
            return
        sec, acc = -1, 0
        for t, n in zip(times, ntoks, strict=True):
            s = int(t + offset)
            if s != sec:
                if acc:
                    series.bucket(sec)[0] += acc
                sec, acc = s, 0
            acc += n
        if acc:
            series.bucket(sec)[0] += acc

    def _add_failed(self, rec: RequestRecord) -> None:
        """A failed (or cancelled) request: its partial tokens, its cause and its error text."""
        outcome = rec.outcome.value
        self.tokens_out_failed += sum(rec.chunk_tokens)
        if rec.cause and rec.outcome not in NOT_FAILED:
            self.causes[rec.cause] = self.causes.get(rec.cause, 0) + 1
        texts = self.errors.setdefault(outcome, {})
        text = rec.error or outcome
        if text in texts or len(texts) < MAX_ERROR_TEXTS:
            texts[text] = texts.get(text, 0) + 1

    def _add_counts(self, rec: RequestRecord) -> None:
        """An ok request's token counts, where they came from, and its length check."""
        self.tokens_out += rec.n_out
        if rec.n_in is not None:
            self.tokens_in += rec.n_in
        self.n_out_sources[rec.n_out_source] = self.n_out_sources.get(rec.n_out_source, 0) + 1
        if rec.n_in_source:
            self.n_in_sources[rec.n_in_source] = self.n_in_sources.get(rec.n_in_source, 0) + 1
        if rec.requested_out is not None:
            self.length_checked += 1
            if rec.n_out != rec.requested_out:
                self.length_mismatch += 1

    def _add_ends(self, rec: RequestRecord, t_end: float, hit: bool | None) -> bool | None:
        """An ok request's end-to-end figures; its cache hit (None when unknown)."""
        h = self.hist
        if hit is None and (rec.n_cached is not None or rec.ideal_cached is not None):
            hit = self.cache.add(rec.n_cached, rec.ideal_cached, rec.n_in)
            if rec.n_cached is not None and (self.first_cached is None or rec.wall_sent < self.first_cached[0]):
                self.first_cached = [rec.wall_sent, rec.n_cached]
        h["e2e"].record(t_end - rec.t_sent)
        h["e2e_queue"].record(t_end - rec.t_sched)
        h["schedule_lag"].record(rec.t_sent - rec.t_sched)
        h["send_delay"].record(rec.t_sent - max(rec.t_sched, rec.t_released or rec.t_sched))
        return hit

    def _add_latencies(self, rec: RequestRecord, t_end: float, offset: float, gaps: tuple) -> float:
        """An ok request with a first token: its end-to-end and token figures; the largest
        per-token gap in s (for the SLOs)."""
        h = self.hist
        hit = self._add_ends(rec, t_end, None)
        t_first = rec.t_first
        assert t_first is not None, "called for a request with a first token"
        h["ttft"].record(t_first - rec.t_sent)
        h["ttft_queue"].record(t_first - rec.t_sched)
        if hit is not None:
            h["ttft_cache_hit" if hit else "ttft_cache_miss"].record(t_first - rec.t_sent)
        if rec.t_first_content is not None:
            h["ttft_content"].record(rec.t_first_content - rec.t_sent)
        if rec.t_first_tool is not None:
            h["ttft_tool"].record(rec.t_first_tool - rec.t_sent)
        times = rec.chunk_times
        if rec.n_out >= 2:
            h["tpot"].record((times[-1] - t_first) / (rec.n_out - 1))
        itl_max = _apply_gaps(gaps, h["itl"], h["inter_chunk"])
        self.by_sent.add(rec, offset, gaps[2])
        self.client.add_reads(times, gaps[0], rec.clock == "kernel", rec.first_wait)
        self._add_phases(rec)
        return itl_max

    def _add_phases(self, rec: RequestRecord) -> None:
        """An ok request's phases (RequestRecord.phases), once per request (not per chunk)."""
        p = rec.phases()
        if p is None:
            return
        connect, send, wait, first_token, receive = p
        h = self.hist
        if connect is not None:
            h["phase_connect"].record(connect)
            if rec.new_connection:
                h["phase_connect_new"].record(connect)
                self.connections.new += 1
            else:
                self.connections.kept += 1
        if send is not None:
            h["phase_send"].record(send)
        h["phase_wait"].record(wait)
        h["phase_first_token"].record(first_token)
        h["phase_receive"].record(receive)

    def _add_kind(self, rec: RequestRecord, t_end: float) -> None:
        k = self.kinds.get(rec.api)
        if k is None:
            k = self.kinds[rec.api] = KindFigures()
        if rec.ok:
            k.ok += 1
            k.items += int((rec.extra or {}).get("items") or 0)
            k.tokens_in += rec.n_in or 0
            k.latency.record(t_end - rec.t_sent)
        elif rec.outcome not in NOT_FAILED:
            k.failed += 1

    def add_cpu_sample(self, percent: float, threshold: float | None = None) -> None:
        """One CPU sample of the client's process (the hub's, once a second), for its client part."""
        self.client.add_cpu_sample(percent, CPU_LIMIT if threshold is None else threshold)

    # ---- merging (master side) ----

    def merge(self, other: Aggregate) -> None:
        self.merge_wire(other.to_wire())

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-friendly dict (bytes, ints, floats, lists, str keys), every part by name, in
        WIRE_VERSION: the counters those that are not 0 (COUNTERS), each part (work, client,
        connections, cache, kinds, groups) its own to_wire."""
        return {
            "v": WIRE_VERSION,
            "hist": {k: [h.encode(), h.sum_us] for k, h in self.hist.items() if h.count},
            "outcomes": {k: v for k, v in self.outcomes.items() if v},
            "errors": self.errors,
            "causes": self.causes,
            "counters": {name: n for name in COUNTERS if (n := getattr(self, name))},
            "n_out_sources": self.n_out_sources,
            "n_in_sources": self.n_in_sources,
            "sum_e2e": self.sum_e2e,
            "first_sent": self.first_sent,
            "last_end": self.last_end,
            "series": [[s, *v] for s, v in self.series.items()],
            "by_sent": self.by_sent.to_wire(),
            "blocks": self.blocks.to_wire(),
            "flow": self.flow.to_wire(),
            "sent_blocks": self.sent_blocks.to_wire(),
            "first_cached": self.first_cached,
            "work": self.work.to_wire(),
            "kinds": {api: k.to_wire() for api, k in self.kinds.items()},
            "cache": self.cache.to_wire(),
            "client": self.client.to_wire(),
            "connections": self.connections.to_wire(),
            "sessions": self.sessions,
            "groups": {
                d: {key: g.to_wire() for key, g in groups.items()} for d, groups in self.groups.items() if groups
            },
        }

    def merge_wire(self, d: dict[str, Any]) -> None:
        """Add another process's figures (to_wire's dict). One of another wire version, or with a
        name in a by-name part this version does not know (wire_problem), is refused whole
        (WireError): a worker of another llm-locust, whose figures cannot be read right."""
        problem = wire_problem(d)
        if problem:
            raise WireError(problem)
        for k, (data, sum_us) in d["hist"].items():
            if k in self.hist:
                self.hist[k].merge_encoded(data, sum_us)
        for k, v in d["outcomes"].items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v
        self._merge_errors(d["errors"], d["causes"])
        for name, n in d["counters"].items():
            setattr(self, name, getattr(self, name) + n)
        for src, n in d["n_out_sources"].items():
            self.n_out_sources[src] = self.n_out_sources.get(src, 0) + n
        for src, n in d["n_in_sources"].items():
            self.n_in_sources[src] = self.n_in_sources.get(src, 0) + n
        self.sum_e2e += d["sum_e2e"]
        if d["first_sent"] is not None and (self.first_sent is None or d["first_sent"] < self.first_sent):
            self.first_sent = d["first_sent"]
        if d["last_end"] is not None and (self.last_end is None or d["last_end"] > self.last_end):
            self.last_end = d["last_end"]
        self._merge_kinds(d["kinds"])
        self.cache.merge_wire(d["cache"])
        self.client.merge_wire(d["client"])
        self.connections.merge_wire(d["connections"])
        self._merge_groups(d["groups"])
        self.by_sent.merge_wire(d["by_sent"])
        self.blocks.merge_wire(d.get("blocks"))
        self.flow.merge_wire(d["flow"])
        self.sent_blocks.merge_wire(d["sent_blocks"])
        first = d.get("first_cached")
        if first is not None and (self.first_cached is None or first[0] < self.first_cached[0]):
            self.first_cached = list(first)
        self.work.merge_wire(d["work"])
        self._merge_sessions(d.get("sessions") or {})
        for s, tokens, ok, failed, *_width in d["series"]:  # a folded row: its width 5th (its first second first)
            b = self.series.bucket(s)
            b[0] += tokens
            b[1] += ok
            b[2] += failed

    def _merge_sessions(self, sessions: dict[str, list[float]]) -> None:
        """Another process's session tallies into ours (a session's turns may run on several)."""
        for sid, t in sessions.items():
            mine = self.sessions.get(sid)
            if mine is None:
                if len(self.sessions) < MAX_SESSIONS:
                    self.sessions[sid] = list(t)
                continue
            for i in range(4):
                mine[i] += t[i]
            mine.extend(t[4 : 4 + MAX_SESSION_TTFTS - (len(mine) - 4)])

    def _merge_errors(self, errors: dict[str, dict[str, int]], causes: dict[str, int]) -> None:
        """Part of merge_wire: error texts (capped per kind as add caps them) and failure causes."""
        for kind, texts in errors.items():
            mine = self.errors.setdefault(kind, {})
            for text, n in texts.items():
                if text in mine or len(mine) < MAX_ERROR_TEXTS:
                    mine[text] = mine.get(text, 0) + n
        for cause, n in causes.items():
            self.causes[cause] = self.causes.get(cause, 0) + n

    def _merge_kinds(self, kinds: dict[str, dict[str, Any]]) -> None:
        """Part of merge_wire: the figures of the request kinds that are not token streams."""
        for api, wire in kinds.items():
            k = self.kinds.get(api)
            if k is None:
                k = self.kinds[api] = KindFigures()
            k.merge_wire(wire)

    def _merge_groups(self, groups_by_dim: dict[str, dict[str, dict[str, Any]]]) -> None:
        """Part of merge_wire: the per-endpoint and per-model figures (unknown dimensions skipped)."""
        for dim, groups in groups_by_dim.items():
            mine = self.groups.get(dim)
            if mine is None:
                continue
            for key, wire in groups.items():
                _group(mine, key).merge_wire(wire)

    # ---- reading ----

    @property
    def finished(self) -> int:
        return sum(self.outcomes.values())

    @property
    def failed(self) -> int:
        """Requests that failed; cancelled ones (in flight when the test stopped) are not failures."""
        return sum(self.outcomes[k] for k in FAILURE_KINDS if k != Outcome.CANCELLED.value)

    @property
    def cancelled(self) -> int:
        return self.outcomes[Outcome.CANCELLED.value]

    @property
    def empty(self) -> bool:
        return self.sent == 0 and self.finished == 0

    @property
    def unaccounted(self) -> int:
        """Sent requests with neither an outcome nor a place in `lost`: 0 once a run has ended
        (sent == ok + failed by kind + cancelled + lost)."""
        return self.sent - self.finished - self.lost


def _record_gaps(times: list[float], ntoks: list[int], itl: Histogram, inter_chunk: Histogram) -> float:
    """ITL and inter-chunk samples for chunks 2..K; returns the largest per-token gap (s)."""
    return _apply_gaps(gap_samples(times, ntoks), itl, inter_chunk)


def _apply_gaps(
    samples: tuple[dict[int, int], int, dict[int, int], int, float], itl: Histogram, inter_chunk: Histogram
) -> float:
    """Add gap_samples' counts and sums to the two histograms; returns the largest per-token gap."""
    ic_counts, ic_sum, itl_counts, itl_sum, itl_max = samples
    for h, counts, total in ((inter_chunk, ic_counts, ic_sum), (itl, itl_counts, itl_sum)):
        h._sum_us += total
        pending = h._pending
        get = pending.get
        for us, count in counts.items():
            pending[us] = get(us, 0) + count
    return itl_max


def _meets(rec: RequestRecord, slos: dict[str, float], itl_max: float) -> bool:
    value: float | None
    for metric, limit in slos.items():
        if metric == "itl_max":
            value = itl_max
        elif metric == "ttft":
            value = rec.ttft
        elif metric == "ttft_queue":
            value = None if rec.t_first is None else rec.t_first - rec.t_sched
        elif metric == "tpot":
            value = rec.tpot
        elif metric == "e2e":
            value = rec.e2e
        elif metric == "e2e_queue":
            value = None if rec.t_end is None else rec.t_end - rec.t_sched
        else:
            raise ValueError(f"unknown SLO metric {metric!r}; known: {', '.join(SLO_METRICS)}")
        if value is not None and value > limit:
            return False
    return True


def figures(agg: Aggregate) -> Figures:
    """The whole-window figures of the metrics spec, in seconds and per-second units."""
    t = totals(agg)
    span = t["duration_s"]
    finished = t["finished"]
    client = t["client_cancelled"]
    out: Figures = {
        "sent": t["sent"],
        "finished": finished,  # sent == ok + failed (by kind) + cancelled + lost, once a run has ended
        "ok": t["ok"],
        "failed": t["failed"],
        "cancelled": t["cancelled"],
        "client_cancelled": client,  # by --cancel: not in latencies
        "outcomes": dict(agg.outcomes),
        "errors": agg.errors,
        "causes": dict(sorted(agg.causes.items(), key=lambda kv: (-kv[1], kv[0]))),
        "error_rate": t["error_rate"],
        "duration_s": span,
        "tokens_in": t["tokens_in"],
        "tokens_out": t["tokens_out"],
        "tokens_out_failed": agg.tokens_out_failed,
        "output_tokens_per_s": t["output_tokens_per_s"],
        "requests_per_s": t["requests_per_s"],
        "goodput_requests_per_s": t["goodput_requests_per_s"],
        "goodput_tokens_per_s": t["goodput_tokens_per_s"],
        "concurrency": t["concurrency"],
        "n_out_sources": agg.n_out_sources,
        "n_in_sources": agg.n_in_sources,
        "length_checked": t["length_checked"],
        "length_mismatch": t["length_mismatch"],
        "latency": latency_figures(agg),
        "lost": agg.lost,
        "workers_lost": agg.workers_lost,
        "client": client_figures(agg),
    }
    phases = phase_figures(agg)
    if phases is not None:
        out["phases"] = phases
    intervals = agg.blocks.intervals(agg.first_sent, agg.last_end)
    if intervals is not None:
        out["intervals"] = intervals
    if agg.kinds:
        out["kinds"] = {
            api: {
                "ok": k.ok,
                "failed": k.failed,
                "items": k.items,
                "tokens_in": k.tokens_in,
                "requests_per_s": per_s(k.ok, span),
                "items_per_s": per_s(k.items, span),
                "input_tokens_per_s": per_s(k.tokens_in, span),
                "latency": k.latency.summary(),
            }
            for api, k in sorted(agg.kinds.items())
        }
    work = agg.work
    if work.audio:
        out["audio"] = {
            "sent": work.audio,
            "bytes": work.audio_bytes,
            "per_request": work.audio / finished if finished else 0.0,
            "bytes_per_s": per_s(work.audio_bytes, span),
        }
    if work.images:
        out["images"] = {
            "sent": work.images,
            "bytes": work.image_bytes,
            "per_request": work.images / finished if finished else 0.0,
            "bytes_per_s": per_s(work.image_bytes, span),
        }
    if agg.cache.any:
        out["cache"] = {
            **agg.cache.figures(),
            "hit_threshold": CACHE_HIT_SHARE,
            "ttft_hit": agg.hist["ttft_cache_hit"].summary(),
            "ttft_miss": agg.hist["ttft_cache_miss"].summary(),
        }
    by = {  # one value is the whole window again
        dim: {key: g.figures(span, agg.first_sent, agg.last_end) for key, g in sorted(groups.items())}
        for dim in GROUP_DIMENSIONS
        if len(groups := agg.groups[dim]) > 1
    }
    if "endpoint" in by:  # GROUP_DIMENSIONS, in their order
        out["by_endpoint"] = by["endpoint"]
    if "model" in by:
        out["by_model"] = by["model"]
    if work.graded:
        out["accuracy"] = accuracy(work.graded, work.correct)
    if work.cancel_drawn:
        out["client_cancel"] = cancel_figures(work.cancel_drawn, client, work.cancel_ended_first)
    if work.structured_checked:
        n = work.structured_checked
        out["structured_output"] = {
            "checked": n,
            "parsed": work.structured_parsed,
            "valid": work.structured_valid,
            "parse_rate": work.structured_parsed / n,
            "valid_rate": work.structured_valid / n,
        }
    return out


def cancel_figures(drawn: int, cancelled: int, ended_first: int) -> ClientCancel:
    """--cancel's draws against what they did: `drawn` requests got a cancel time, `cancelled` were
    aborted at it (client_cancelled), `ended_first` ended, ok or failed, before it came (a cancel
    after 1-4 s misses a reply done in 0.5 s), and the rest were stopped in flight by the run's end."""
    return {
        "drawn": drawn,
        "cancelled": cancelled,
        "ended_first": ended_first,
        "stopped": max(0, drawn - cancelled - ended_first),
    }


def phase_figures(agg: Aggregate) -> Phases | None:
    """The request phases (docs/metrics.md, "Request phases"): each phase's summary (seconds),
    the connect of new connections alone, and the count of new and kept-alive connections; None
    when no request was timed in phases (a results file of an older version, JSON request kinds)."""
    h = agg.hist
    if not h["phase_wait"].count:
        return None
    conn = agg.connections
    return {  # PHASES, in their order
        "connect": h["phase_connect"].summary(),
        "send": h["phase_send"].summary(),
        "wait": h["phase_wait"].summary(),
        "first_token": h["phase_first_token"].summary(),
        "receive": h["phase_receive"].summary(),
        "connect_new": h["phase_connect_new"].summary(),
        "connections": {"new": conn.new, "reused": conn.kept},
    }


def accuracy(graded: int, correct: int) -> Accuracy:
    """Accuracy under load (docs/verdicts.md): graded items that ended ok, those answered right,
    and their ratio."""
    return {"graded": graded, "correct": correct, "accuracy": correct / graded if graded else None}


def validity(fig: Mapping[str, Any], max_error_rate: float) -> list[str]:
    """The marks that make `figures()` suspect: client_saturated (the client may have distorted
    them: `fig["client"]["reasons"]` says which check tripped), errors (error rate above the
    limit), length_mismatch (outputs not of the length asked for), usage_rejected (a server's
    output token counts far from what was read, not used: protocols.base count_believed), no_data (nothing succeeded),
    workers_lost (a worker was lost: the requests it had in flight, `lost`, have no outcome and
    what it sent after its last report is missing). Runs, aggregate steps and ladder steps use these."""
    flags = []
    if not fig["client"]["valid"]:
        flags.append("client_saturated")
    if fig["error_rate"] > max_error_rate:
        flags.append("errors")
    if fig["length_mismatch"]:
        flags.append("length_mismatch")
    if (fig.get("n_out_sources") or {}).get(SOURCE_REJECTED):
        flags.append("usage_rejected")
    if not fig["ok"]:
        flags.append("no_data")
    if fig.get("lost") or fig.get("workers_lost"):
        flags.append("workers_lost")
    return flags


# Client validity (docs/metrics.md, "Client validity"; measured with benchmarks/bench_validity.py).
# The client is judged on what distorts its figures, over the measurement only (the hub samples
# the loop and the CPU after spawning and before stopping, and in a ladder only inside a step's
# measurement window):
#  - tokens read together: with the kernel's receive time on every read, a late read keeps the
#    data's arrival time; what it cannot undo is two token events the server wrote apart arriving
#    in one read: both get the later one's time (a gap of 0 and a gap of two intervals). Against
#    the simulator's token log every timing error above 1 ms was such a read (32 to 1,000 streams);
#    past 1% the p99 figures move (ITL p99 +3% at 0.45% of the gaps, +36% at 1.8%; TTFT p99 +2%
#    at 0.7% of the first tokens read with the second, +22% at 2.3%);
#  - the send delay: requests sent late against their schedule: the load is not the one asked for;
#  - the loop lag, where a read was timed as it returned (TLS, other systems): there the lag is
#    the timing error itself. With kernel stamps it only gates the count above (a lag p99 of 47 ms
#    beside figures within 0.5% at 32 streams, 15 ms beside exact ones and 32 ms beside a TTFT p99
#    22% high at 500);
#  - the CPU is reported, not judged: a busy client shows in the two checks above.
READ_TOGETHER_SHARE = 0.01  # of the token gaps of paced streams: above it, p99 figures move
READ_TOGETHER_MIN_GAPS = 1000  # fewer gaps than this: too few to judge a 1% share
READ_TOGETHER_MIN_FIRSTS = 200  # ... and first tokens read with the second (TTFT p99), of this many requests
LATE_SHARE = 0.01  # ... and only when the loop woke over LAG_LIMIT late in more than this share of
# its samples: a server that falls behind and then writes two tokens at once gives the same gap of
# 0 (the simulator on a busy machine: 0.43% of its gaps, none read late, loop-lag p99 5 ms)
LATE_MIN_SAMPLES = 3  # ... and in at least this many: one late wake in a 4 s run is 1 of ~35 samples,
# 2.9%, yet a 12 ms stall can join only the tokens of those 12 ms (the CI run of 2026-12-02: a
# server sending 7.7% of its gaps together, one sample 12 ms late, judged suspect)
PACED_GAP = 0.001  # s a token on average over a stream: paced (a server writing every token at once is not)
# s: a first token read with the second in a read whose newest data had itself waited in the
# socket longer than this (its kernel receive time against the read's, RequestRecord.first_wait)
# was read late by the client. Where most such pairs were, they are its lateness, proven per read,
# where the loop-lag samples (0.1 s apart) miss stalls shorter than LAG_LIMIT or between two
# samples (a first wave's ends at 100 streams: 1.5% of first tokens 10-30 ms late, the loop late
# in 1 sample; docs/accuracy.md). A server's two tokens written at once, read by a client that
# kept up, waited microseconds
WAITED_LONG = 0.001
LAG_LIMIT = 0.010  # s: a loop-lag sample above this delays a user-space-stamped read by as much
LAG_SHARE = 0.05  # ... in more than this share of the samples (0.1 s apart)
LAG_MIN_SAMPLES = 5  # ... and in at least this many of them (half a second of stalls)
SEND_DELAY_LIMIT = 0.050  # s: p99 of the send delay (t_sent - t_sched: late against the schedule)
SEND_DELAY_MIN_REQUESTS = 20  # fewer requests than this: too few for a p99
CPU_LIMIT = 90.0  # %: a CPU sample (one a second) at or above this is "high" (reported)


def validity_rule() -> str:
    """The client-validity rule in one statement, with its thresholds: what the summary's legend,
    the report's legend, the web view and docs/metrics.md say (all from here)."""
    return (
        "The client's figures are suspect (client_saturated) when one of these holds over the "
        "measurement. (1) Tokens read together while the client was late: in the paced streams (at "
        f"least {PACED_GAP * 1000:g} ms a token), more than {READ_TOGETHER_SHARE:.0%} of the token gaps are 0 "
        f"(from at least {READ_TOGETHER_MIN_GAPS:,} gaps) or more than {READ_TOGETHER_SHARE:.0%} of the first "
        f"tokens came in one read with the second (from at least {READ_TOGETHER_MIN_FIRSTS} requests): two "
        "token events stamped with one read's time, the earlier one timed late; counted while the "
        f"client's event loop woke over {LAG_LIMIT * 1000:g} ms late in more than {LATE_SHARE:.0%} of its "
        f"samples and in at least {LATE_MIN_SAMPLES} of them, or, for the first tokens, when most of "
        "those read with the second came in a read whose newest data had itself waited in the socket "
        f"over {WAITED_LONG * 1000:g} ms (its kernel receive time against the read's: the client was "
        "not reading); else the server sent them together. (2) The "
        "send delay against the schedule (from a "
        "send's due time, or from when --max-in-flight or --max-prefill let a held send go) has a p99 above "
        f"{SEND_DELAY_LIMIT * 1000:g} ms (from at least {SEND_DELAY_MIN_REQUESTS} requests). (3) Where "
        "reads were not all stamped with the kernel's receive time, the event-loop lag is over "
        f"{LAG_LIMIT * 1000:g} ms in more than {LAG_SHARE:.0%} of its samples. The loop lag with kernel "
        "stamps, and the CPU, are reported, not judged."
    )


def client_checks(agg: Aggregate) -> list[ClientCheck]:
    """Every client check with its threshold and measured value; `tripped` marks the failing ones."""
    return [_read_together_check(agg), _send_delay_check(agg), _lag_check(agg)]


def _late(agg: Aggregate) -> tuple[int, int]:
    """The loop-lag samples over LAG_LIMIT, of how many: how often the client's loop woke late."""
    lag = agg.hist["loop_lag"]
    return sum(c for low_us, c in lag.buckets_us() if low_us > LAG_LIMIT * 1e6), lag.count


def _read_together_check(agg: Aggregate) -> ClientCheck:
    c = agg.client
    gaps, together, firsts, firsts_together = c.paced_gaps, c.gaps_together, c.paced_requests, c.first_together
    share = together / gaps if gaps else 0.0
    first = firsts_together / firsts if firsts else 0.0
    waited = c.first_waited / firsts if firsts else 0.0
    n_late, samples = _late(agg)
    late = n_late / samples if samples else 0.0
    text = f"tokens read together in {share:.1%} of {gaps:,} gaps (limit {READ_TOGETHER_SHARE:.0%})"
    over = gaps >= READ_TOGETHER_MIN_GAPS and share > READ_TOGETHER_SHARE
    first_late = False  # first tokens read late, by their reads' arrival spread
    if firsts >= READ_TOGETHER_MIN_FIRSTS and first > READ_TOGETHER_SHARE:
        over = True
        text += f", first tokens with the second in {first:.1%} of {firsts:,} requests"
        if c.first_waited:
            text += f" ({c.first_waited:,} of them read over {WAITED_LONG * 1000:g} ms after their data came)"
        first_late = 2 * c.first_waited > firsts_together
    was_late = (late > LATE_SHARE and n_late >= LATE_MIN_SAMPLES) or first_late
    if over and not was_late:
        text += (
            f" while the client kept up (loop late in {n_late} of its {samples:,} samples, {late:.1%}):"
            " the server sent them together"
        )
    return {
        "check": "read_together",
        "tripped": over and was_late,
        "value": share,
        "threshold": READ_TOGETHER_SHARE,
        "samples": gaps,
        "first_share": first,
        "first_waited_share": waited,
        "late_share": late,
        "late_samples": n_late,
        "first_samples": firsts,
        "text": text,
    }


def _send_delay_check(agg: Aggregate) -> ClientCheck:
    sd = agg.hist["send_delay"]
    p99 = sd.percentile(99) if sd.count >= SEND_DELAY_MIN_REQUESTS else None
    return {
        "check": "send_delay",
        "tripped": p99 is not None and p99 > SEND_DELAY_LIMIT,
        "value": p99,
        "threshold": SEND_DELAY_LIMIT,
        "samples": sd.count,
        "text": f"send delay against the schedule p99 {'-' if p99 is None else f'{p99 * 1000:.1f}'} ms"
        f" (limit {SEND_DELAY_LIMIT * 1000:g} ms)",
    }


def _lag_check(agg: Aggregate) -> ClientCheck:
    lag = agg.hist["loop_lag"]
    n = lag.count
    limit_us = LAG_LIMIT * 1e6
    over = sum(c for low_us, c in lag.buckets_us() if low_us > limit_us) if n else 0
    share = over / n if n else 0.0
    timed = agg.hist["ttft"].count
    judged = not timed or agg.client.kernel_clock < timed  # some read timed as it returned, or no request yet
    text = f"event-loop lag over {LAG_LIMIT * 1000:g} ms in {share:.1%} of {n} samples (limit {LAG_SHARE:.0%})"
    return {
        "check": "loop_lag",
        "tripped": judged and n > 0 and over >= LAG_MIN_SAMPLES and share > LAG_SHARE,
        "judged": judged,
        "value": share,
        "threshold": LAG_SHARE,
        "samples": n,
        "text": text if judged else text.replace(" (limit", " (every read kernel-stamped: not judged; limit"),
    }


def _has_samples(check: ClientCheck) -> bool:
    """Whether a check had the samples its rule needs to judge (a check with fewer can pass, never
    vouch for the client)."""
    name, n = check["check"], check["samples"]
    if name == "read_together":
        return n >= READ_TOGETHER_MIN_GAPS or check.get("first_samples", 0) >= READ_TOGETHER_MIN_FIRSTS
    if name == "send_delay":
        return n >= SEND_DELAY_MIN_REQUESTS
    return bool(check.get("judged", True)) and n >= LAG_MIN_SAMPLES


def client_verdict(checks: list[ClientCheck]) -> str:
    """The verdict: "suspect" when a check tripped, "valid" when none did and one had the samples
    to judge, else "unknown" (0 samples, or too few for every check: nothing vouches for the client)."""
    if any(c["tripped"] for c in checks):
        return "suspect"
    return "valid" if any(_has_samples(c) for c in checks) else "unknown"


def client_figures(agg: Aggregate) -> ClientFigures:
    checks = client_checks(agg)
    tripped = [c for c in checks if c["tripped"]]
    c = agg.client
    return {
        "loop_lag": agg.hist["loop_lag"].summary(),
        "cpu_max_percent": c.cpu_max,
        "cpu_samples": c.cpu_samples,
        "cpu_high_samples": c.cpu_high,
        "read_together": {
            "gaps": c.paced_gaps,
            "together": c.gaps_together,
            "share": checks[0]["value"],
            "requests": c.paced_requests,
            "first_together": c.first_together,
            "first_share": checks[0]["first_share"],
            "first_waited": c.first_waited,
        },
        "checks": checks,
        "reasons": [c["text"] for c in tripped],
        "valid": not tripped,  # no check tripped; on too few samples that is no verdict: see "verdict"
        "verdict": client_verdict(checks),
    }


def client_line(client: Mapping[str, Any]) -> str:
    """The summary's client line: the verdict, what each check measured against its limit, then
    the loop lag and CPU (reported). E.g. "client: valid: tokens read together 0.3% (limit 1%),
    send delay p99 2.1 ms (limit 50 ms); loop lag p99 27.2 ms, CPU max 19%"."""
    checks = client.get("checks") or []
    measured = "; ".join(c["text"] for c in checks if c.get("judged", True))
    verdict = "valid" if client.get("valid") else "SUSPECT (figures may be distorted)"
    if client.get("valid") and client.get("verdict") == "unknown":
        verdict = "unknown (too few samples for any check to judge)"
    if not client.get("valid"):
        measured = "; ".join(client.get("reasons") or []) or measured
    lag = (client.get("loop_lag") or {}).get("p99")
    lag_text = "-" if lag is None else f"{lag * 1000:.1f}"
    cpu = client.get("cpu_max_percent") or 0
    return f"client: {verdict}: {measured}; loop lag p99 {lag_text} ms, CPU max {cpu:.0f}%"


def client_valid(agg: Aggregate) -> bool:
    """False when the client itself may have distorted the figures: a check of `client_checks` tripped."""
    return not any(c["tripped"] for c in client_checks(agg))

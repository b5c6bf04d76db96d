"""Request records -> mergeable figures. Knows nothing of HTTP or Locust.

An `Aggregate` is what one worker saw (or, merged, what the cluster saw) over some window:
latency histograms, counters by outcome, token counts and per-second series. Every part of it
merges exactly: histograms add bucket counts, counters add, series add per second.
"""

from __future__ import annotations

from typing import Any

from llm_locust.metrics.records import FAILURE_KINDS, OUTCOMES, Outcome, RequestRecord
from llm_locust.metrics.histogram import Histogram

# Histograms of per-request (or per-token) latencies, in seconds. See docs/metrics.md.
LATENCIES = (
    "ttft",  # t_first - t_sent
    "ttft_content",  # t_first_content - t_sent (differs from ttft for reasoning models)
    "ttft_queue",  # t_first - t_sched
    "schedule_lag",  # t_sent - t_sched
    "itl",  # per token: gap_k / n_k, n_k samples
    "inter_chunk",  # per chunk: gap_k
    "tpot",  # per request: (t_last - t_first) / (N_out - 1)
    "e2e",  # t_end - t_sent
    "e2e_queue",  # t_end - t_sched
)
CLIENT_LATENCIES = ("loop_lag",)  # client validity: how late the worker's event loop wakes
SLO_METRICS = ("ttft", "ttft_queue", "tpot", "e2e", "e2e_queue", "itl_max")
MAX_ERROR_TEXTS = 10  # distinct error texts kept per failure kind


# Request kinds whose replies are one JSON body, not a token stream (protocols.JSON_API_NAMES):
# latency is their E2E; they have no TTFT, ITL or TPOT and no output tokens.
KIND_APIS = frozenset({"openai-embeddings", "rerank", "vllm-score"})


class KindFigures:
    """One non-generation request kind: ok, failed, items (embeddings returned, documents
    scored), input tokens and latency."""

    __slots__ = ("ok", "failed", "items", "tokens_in", "latency")

    def __init__(self) -> None:
        self.ok = self.failed = self.items = self.tokens_in = 0
        self.latency = Histogram()


class Aggregate:
    def __init__(self) -> None:
        self.hist: dict[str, Histogram] = {name: Histogram() for name in LATENCIES + CLIENT_LATENCIES}
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
        # wall second -> [tokens arrived, requests ok, requests failed]
        self.series: dict[int, list[int]] = {}
        self.cpu_samples = 0
        self.cpu_high = 0  # samples at or above the validity threshold
        self.cpu_max = 0.0
        # requests a lost worker had in flight at its last report (or a worker that never sent its
        # final report): sent, but their outcome never reached the master. Master side only.
        self.lost = 0
        self.workers_lost = 0
        # request kinds that are not token streams (embeddings, rerank, score): their own figures,
        # kept out of the generation latencies and token counts; by API name
        self.kinds: dict[str, KindFigures] = {}
        # workload options (docs/prompts.md): images sent and their bytes (before base64), over
        # every finished request; structured output checked / parsed as JSON / valid for the schema
        self.images_sent = 0
        self.image_bytes = 0
        self.structured_checked = 0
        self.structured_parsed = 0
        self.structured_valid = 0

    # ---- recording (worker side) ----

    def add_sent(self, n: int = 1) -> None:
        self.sent += n

    def add(self, rec: RequestRecord, slos: dict[str, float] | None = None) -> None:
        """Fold one finished request in. Failed requests count, but stay out of latencies."""
        outcome = rec.outcome.value
        self.outcomes[outcome] += 1
        t_end = rec.t_end if rec.t_end is not None else rec.t_sent
        offset = rec.wall_sent - rec.t_sent  # perf_counter -> wall clock for this request
        wall_end = t_end + offset
        if self.first_sent is None or rec.wall_sent < self.first_sent:
            self.first_sent = rec.wall_sent
        if self.last_end is None or wall_end > self.last_end:
            self.last_end = wall_end
        self.sum_e2e += t_end - rec.t_sent
        series = self.series
        end_bucket = series.get(int(wall_end))
        if end_bucket is None:
            end_bucket = series[int(wall_end)] = [0, 0, 0]
        if rec.ok:
            end_bucket[1] += 1
        elif rec.outcome is not Outcome.CANCELLED:  # cancelled at stop: not a failure of the server
            end_bucket[2] += 1

        times, ntoks = rec.chunk_times, rec.chunk_tokens
        # Tokens by arrival second: most requests fall within one second; else run-length.
        if times:
            first_sec = int(times[0] + offset)
            if first_sec == int(times[-1] + offset):
                _bucket(series, first_sec)[0] += sum(ntoks)
            else:
                sec, acc = -1, 0
                for t, n in zip(times, ntoks):
                    s = int(t + offset)
                    if s != sec:
                        if acc:
                            _bucket(series, sec)[0] += acc
                        sec, acc = s, 0
                    acc += n
                if acc:
                    _bucket(series, sec)[0] += acc

        extra = rec.extra
        if extra:
            images = extra.get("images")
            if images:
                self.images_sent += images
                self.image_bytes += extra.get("image_bytes") or 0
            parsed = extra.get("json_parsed")
            if parsed is not None:
                self.structured_checked += 1
                self.structured_parsed += bool(parsed)
                self.structured_valid += bool(extra.get("json_valid"))

        if rec.api in KIND_APIS:
            self._add_kind(rec, t_end)
            if rec.ok:
                return
        if not rec.ok:
            self.tokens_out_failed += sum(ntoks)
            if rec.cause and rec.outcome is not Outcome.CANCELLED:
                self.causes[rec.cause] = self.causes.get(rec.cause, 0) + 1
            texts = self.errors.setdefault(outcome, {})
            text = rec.error or outcome
            if text in texts or len(texts) < MAX_ERROR_TEXTS:
                texts[text] = texts.get(text, 0) + 1
            return

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

        h = self.hist
        h["e2e"].record(t_end - rec.t_sent)
        h["e2e_queue"].record(t_end - rec.t_sched)
        h["schedule_lag"].record(rec.t_sent - rec.t_sched)
        itl_max = 0.0
        if rec.t_first is not None:
            h["ttft"].record(rec.t_first - rec.t_sent)
            h["ttft_queue"].record(rec.t_first - rec.t_sched)
            if rec.t_first_content is not None:
                h["ttft_content"].record(rec.t_first_content - rec.t_sent)
            if rec.n_out >= 2:
                h["tpot"].record((times[-1] - rec.t_first) / (rec.n_out - 1))
            itl_max = _record_gaps(times, ntoks, h["itl"], h["inter_chunk"])

        if slos and _meets(rec, slos, itl_max):
            self.goodput_requests += 1
            self.goodput_tokens += rec.n_out

    def _add_kind(self, rec: RequestRecord, t_end: float) -> None:
        k = self.kinds.get(rec.api)
        if k is None:
            k = self.kinds[rec.api] = KindFigures()
        if rec.ok:
            k.ok += 1
            k.items += int((rec.extra or {}).get("items") or 0)
            k.tokens_in += rec.n_in or 0
            k.latency.record(t_end - rec.t_sent)
        elif rec.outcome is not Outcome.CANCELLED:
            k.failed += 1

    def add_cpu_sample(self, percent: float, threshold: float | None = None) -> None:
        if threshold is None:
            threshold = CPU_LIMIT
        self.cpu_samples += 1
        self.cpu_max = max(self.cpu_max, percent)
        if percent >= threshold:
            self.cpu_high += 1

    # ---- merging (master side) ----

    def merge(self, other: "Aggregate") -> None:
        self.merge_wire(other.to_wire())

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-friendly dict (bytes, ints, floats, lists, str keys)."""
        return {
            "hist": {k: [h.encode(), h.sum_us] for k, h in self.hist.items() if h.count},
            "outcomes": {k: v for k, v in self.outcomes.items() if v},
            "errors": self.errors,
            "causes": self.causes,
            "counters": [
                self.sent,
                self.tokens_in,
                self.tokens_out,
                self.tokens_out_failed,
                self.length_checked,
                self.length_mismatch,
                self.goodput_requests,
                self.goodput_tokens,
                self.cpu_samples,
                self.cpu_high,
            ],
            "n_out_sources": self.n_out_sources,
            "n_in_sources": self.n_in_sources,
            "sum_e2e": self.sum_e2e,
            "first_sent": self.first_sent,
            "last_end": self.last_end,
            "cpu_max": self.cpu_max,
            "series": [[s, *v] for s, v in self.series.items()],
            "lost": [self.lost, self.workers_lost],
            "kinds": {api: [k.ok, k.failed, k.items, k.tokens_in, k.latency.encode(), k.latency.sum_us]
                      for api, k in self.kinds.items()},
            "workload": [self.images_sent, self.image_bytes, self.structured_checked, self.structured_parsed,
                         self.structured_valid],
        }

    def merge_wire(self, d: dict[str, Any]) -> None:
        for k, (data, sum_us) in d["hist"].items():
            if k in self.hist:
                self.hist[k].merge_encoded(data, sum_us)
        for k, v in d["outcomes"].items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v
        for kind, texts in d["errors"].items():
            mine = self.errors.setdefault(kind, {})
            for text, n in texts.items():
                if text in mine or len(mine) < MAX_ERROR_TEXTS:
                    mine[text] = mine.get(text, 0) + n
        for cause, n in (d.get("causes") or {}).items():  # absent from older wire dicts
            self.causes[cause] = self.causes.get(cause, 0) + n
        (
            sent,
            tokens_in,
            tokens_out,
            tokens_out_failed,
            length_checked,
            length_mismatch,
            goodput_requests,
            goodput_tokens,
            cpu_samples,
            cpu_high,
        ) = d["counters"]
        self.sent += sent
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.tokens_out_failed += tokens_out_failed
        self.length_checked += length_checked
        self.length_mismatch += length_mismatch
        self.goodput_requests += goodput_requests
        self.goodput_tokens += goodput_tokens
        self.cpu_samples += cpu_samples
        self.cpu_high += cpu_high
        for src, n in d["n_out_sources"].items():
            self.n_out_sources[src] = self.n_out_sources.get(src, 0) + n
        for src, n in d["n_in_sources"].items():
            self.n_in_sources[src] = self.n_in_sources.get(src, 0) + n
        self.sum_e2e += d["sum_e2e"]
        if d["first_sent"] is not None and (self.first_sent is None or d["first_sent"] < self.first_sent):
            self.first_sent = d["first_sent"]
        if d["last_end"] is not None and (self.last_end is None or d["last_end"] > self.last_end):
            self.last_end = d["last_end"]
        self.cpu_max = max(self.cpu_max, d["cpu_max"])
        lost, workers_lost = d.get("lost") or (0, 0)
        self.lost += lost
        self.workers_lost += workers_lost
        for api, (ok, failed, items, tokens_in, data, sum_us) in (d.get("kinds") or {}).items():
            k = self.kinds.get(api)
            if k is None:
                k = self.kinds[api] = KindFigures()
            k.ok += ok
            k.failed += failed
            k.items += items
            k.tokens_in += tokens_in
            k.latency.merge_encoded(data, sum_us)
        images_sent, image_bytes, checked, parsed, valid = d.get("workload") or (0, 0, 0, 0, 0)
        self.images_sent += images_sent
        self.image_bytes += image_bytes
        self.structured_checked += checked
        self.structured_parsed += parsed
        self.structured_valid += valid
        for s, tokens, ok, failed in d["series"]:
            b = _bucket(self.series, s)
            b[0] += tokens
            b[1] += ok
            b[2] += failed

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


def _bucket(series: dict[int, list[int]], sec: int) -> list[int]:
    b = series.get(sec)
    if b is None:
        b = series[sec] = [0, 0, 0]
    return b


def _record_gaps(times: list[float], ntoks: list[int], itl: Histogram, inter_chunk: Histogram) -> float:
    """ITL and inter-chunk samples for chunks 2..K; returns the largest per-token gap (s).

    Equal consecutive samples (chunks that arrived in one read) are recorded once with a count.
    """
    itl_max_us = 0.0
    prev = times[0] if times else 0.0
    run_gap = run_n = -1
    run_len = 0
    for i in range(1, len(times)):
        t = times[i]
        gap_us = round((t - prev) * 1e6)
        prev = t
        n = ntoks[i]
        if gap_us == run_gap and n == run_n:
            run_len += 1
            continue
        if run_len:
            itl_max_us = max(itl_max_us, _flush(run_gap, run_n, run_len, itl, inter_chunk))
        run_gap, run_n, run_len = gap_us, n, 1
    if run_len:
        itl_max_us = max(itl_max_us, _flush(run_gap, run_n, run_len, itl, inter_chunk))
    return itl_max_us / 1e6


def _flush(gap_us: int, n: int, run_len: int, itl: Histogram, inter_chunk: Histogram) -> float:
    if gap_us < 0:
        gap_us = 0
    inter_chunk.record_us(gap_us, run_len)
    per_token = gap_us / n
    itl.record_us(round(per_token), run_len * n)
    return per_token


def _meets(rec: RequestRecord, slos: dict[str, float], itl_max: float) -> bool:
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


def figures(agg: Aggregate) -> dict[str, Any]:
    """The whole-window figures of the metrics spec, in seconds and per-second units."""
    span = (agg.last_end - agg.first_sent) if agg.first_sent is not None and agg.last_end is not None else 0.0
    finished = agg.finished
    ok = agg.outcomes.get(Outcome.OK.value, 0)
    out: dict[str, Any] = {
        "sent": agg.sent,
        "finished": finished,  # sent == ok + failed (by kind) + cancelled + lost, once a run has ended
        "ok": ok,
        "failed": agg.failed,
        "cancelled": agg.cancelled,
        "outcomes": dict(agg.outcomes),
        "errors": agg.errors,
        "causes": dict(sorted(agg.causes.items(), key=lambda kv: (-kv[1], kv[0]))),
        "error_rate": (agg.failed / (finished - agg.cancelled)) if finished > agg.cancelled else 0.0,
        "duration_s": span,
        "tokens_in": agg.tokens_in,
        "tokens_out": agg.tokens_out,
        "tokens_out_failed": agg.tokens_out_failed,
        "output_tokens_per_s": agg.tokens_out / span if span > 0 else 0.0,
        "requests_per_s": ok / span if span > 0 else 0.0,
        "goodput_requests_per_s": agg.goodput_requests / span if span > 0 else 0.0,
        "goodput_tokens_per_s": agg.goodput_tokens / span if span > 0 else 0.0,
        "concurrency": agg.sum_e2e / span if span > 0 else 0.0,
        "n_out_sources": agg.n_out_sources,
        "n_in_sources": agg.n_in_sources,
        "length_checked": agg.length_checked,
        "length_mismatch": agg.length_mismatch,
        "latency": {k: agg.hist[k].summary() for k in LATENCIES},
        "lost": agg.lost,
        "workers_lost": agg.workers_lost,
        "client": client_figures(agg),
    }
    if agg.kinds:
        out["kinds"] = {
            api: {"ok": k.ok, "failed": k.failed, "items": k.items, "tokens_in": k.tokens_in,
                  "requests_per_s": k.ok / span if span > 0 else 0.0,
                  "items_per_s": k.items / span if span > 0 else 0.0,
                  "input_tokens_per_s": k.tokens_in / span if span > 0 else 0.0,
                  "latency": k.latency.summary()}
            for api, k in sorted(agg.kinds.items())
        }
    if agg.images_sent:
        out["images"] = {"sent": agg.images_sent, "bytes": agg.image_bytes,
                         "per_request": agg.images_sent / finished if finished else 0.0,
                         "bytes_per_s": agg.image_bytes / span if span > 0 else 0.0}
    if agg.structured_checked:
        n = agg.structured_checked
        out["structured_output"] = {"checked": n, "parsed": agg.structured_parsed, "valid": agg.structured_valid,
                                    "parse_rate": agg.structured_parsed / n, "valid_rate": agg.structured_valid / n}
    return out


def validity(fig: dict[str, Any], max_error_rate: float) -> list[str]:
    """The marks that make `figures()` suspect: client_saturated (the client may have distorted
    them: `fig["client"]["reasons"]` says which check tripped), errors (error rate above the
    limit), length_mismatch (outputs not of the length asked for), no_data (nothing succeeded),
    workers_lost (a worker was lost: the requests it had in flight, `lost`, have no outcome and
    what it sent after its last report is missing). Runs, aggregate steps and ladder steps use these."""
    flags = []
    if not fig["client"]["valid"]:
        flags.append("client_saturated")
    if fig["error_rate"] > max_error_rate:
        flags.append("errors")
    if fig["length_mismatch"]:
        flags.append("length_mismatch")
    if not fig["ok"]:
        flags.append("no_data")
    if fig.get("lost") or fig.get("workers_lost"):
        flags.append("workers_lost")
    return flags


# Client validity (docs/metrics.md). The client is judged on what distorts its figures, over the
# measurement only (the hub samples the loop and the CPU after spawning and before stopping, and
# in a ladder only inside a step's measurement window), and on sustained trouble, not one stall:
LAG_LIMIT = 0.010  # s: a loop-lag sample above this delays sends and reads by as much
LAG_SHARE = 0.05  # ... in more than this share of the samples (0.1 s apart)
LAG_MIN_SAMPLES = 5  # ... and in at least this many of them (half a second of stalls)
SEND_DELAY_LIMIT = 0.050  # s: p99 of the send delay (t_sent - t_sched: late against the schedule)
SEND_DELAY_MIN_REQUESTS = 20  # fewer requests than this: too few for a p99
CPU_LIMIT = 90.0  # %: a CPU sample (one a second) at or above this is "high"
CPU_SHARE = 0.5  # ... in at least this share of the samples
CPU_MIN_SAMPLES = 3


def client_checks(agg: Aggregate) -> list[dict[str, Any]]:
    """Every client check with its threshold and measured value; `tripped` marks the failing ones."""
    checks = []
    lag = agg.hist["loop_lag"]
    n = lag.count
    limit_us = LAG_LIMIT * 1e6
    over = sum(c for low_us, c in lag.buckets_us() if low_us > limit_us) if n else 0
    share = over / n if n else 0.0
    checks.append({
        "check": "loop_lag", "tripped": n > 0 and over >= LAG_MIN_SAMPLES and share > LAG_SHARE,
        "value": share, "threshold": LAG_SHARE, "samples": n,
        "text": f"event-loop lag over {LAG_LIMIT * 1000:g} ms in {share:.1%} of {n} samples (limit {LAG_SHARE:.0%})",
    })
    sd = agg.hist["schedule_lag"]
    p99 = sd.percentile(99) if sd.count >= SEND_DELAY_MIN_REQUESTS else None
    checks.append({
        "check": "send_delay", "tripped": p99 is not None and p99 > SEND_DELAY_LIMIT,
        "value": p99, "threshold": SEND_DELAY_LIMIT, "samples": sd.count,
        "text": f"send delay against the schedule p99 {'-' if p99 is None else f'{p99 * 1000:.1f}'} ms"
                f" (limit {SEND_DELAY_LIMIT * 1000:g} ms)",
    })
    cs = agg.cpu_samples
    high = agg.cpu_high / cs if cs else 0.0
    checks.append({
        "check": "cpu", "tripped": cs >= CPU_MIN_SAMPLES and high >= CPU_SHARE,
        "value": high, "threshold": CPU_SHARE, "samples": cs,
        "text": f"CPU at or above {CPU_LIMIT:g}% in {high:.0%} of {cs} samples (limit {CPU_SHARE:.0%})",
    })
    return checks


def client_figures(agg: Aggregate) -> dict[str, Any]:
    checks = client_checks(agg)
    tripped = [c for c in checks if c["tripped"]]
    return {
        "loop_lag": agg.hist["loop_lag"].summary(),
        "cpu_max_percent": agg.cpu_max,
        "cpu_samples": agg.cpu_samples,
        "cpu_high_samples": agg.cpu_high,
        "checks": checks,
        "reasons": [c["text"] for c in tripped],
        "valid": not tripped,
    }


def client_valid(agg: Aggregate) -> bool:
    """False when the client itself may have distorted the figures: a check of `client_checks` tripped."""
    return not any(c["tripped"] for c in client_checks(agg))

"""Optional raw log: one JSON line per finished request, for audits and ground-truth checks."""

from __future__ import annotations

from typing import BinaryIO

import orjson

from llm_locust.metrics.records import RequestRecord


def record_dict(rec: RequestRecord) -> dict:
    t0 = rec.t_sent
    rel = lambda t: None if t is None else t - t0  # noqa: E731
    return {
        "id": rec.request_id,
        "api": rec.api,
        "step": rec.step,
        "source": rec.source,
        "outcome": rec.outcome.value,
        "status": rec.status,
        "error": rec.error,
        "cause": rec.cause,
        "wall_sent": rec.wall_sent,
        "t_sent": t0,  # perf_counter seconds on the sending worker; the others are relative to it
        "sched": rel(rec.t_sched),
        "headers": rel(rec.t_headers),
        "first": rel(rec.t_first),
        "first_content": rel(rec.t_first_content),
        "first_tool": rel(rec.t_first_tool),
        "end": rel(rec.t_end),
        "chunks": [t - t0 for t in rec.chunk_times],
        "chunk_tokens": rec.chunk_tokens,
        "n_out": rec.n_out,
        "n_out_source": rec.n_out_source,
        "n_in": rec.n_in,
        "n_in_source": rec.n_in_source,
        "requested_out": rec.requested_out,
        "finish_reason": rec.finish_reason,
        "n_cached": rec.n_cached,  # prompt tokens the server served from its cache (None: unsaid)
        "ideal_cached": rec.ideal_cached,  # what an unbounded prefix cache could have served (None: unknown)
        "endpoint": rec.endpoint,
        "model": rec.model,
        "session": rec.session,
        "server": rec.extra,  # what the server reported about the request (llama.cpp timings...)
    }


class RecordLog:
    """Opened at the first record, so a process that sent nothing leaves no file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f: BinaryIO | None = None

    def write(self, rec: RequestRecord) -> None:
        if self._f is None:
            self._f = open(self.path, "ab", buffering=1 << 16)
        self._f.write(orjson.dumps(record_dict(rec)) + b"\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

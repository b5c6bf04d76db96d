"""Emptying the server's prefix cache (--reset-cache): the exchanges with each engine.

When a run resets (before the load, between ladder steps) is the runtime's: runtime/cache_reset.py.

Why: a server's prefix cache keeps what the last step or the last repetition left, so the hit
ratio (and with it TTFT) of step k depends on step k-1. `--reset-cache repeat` empties it once
before the load of every run (each repetition of `--repeat N` is a run of its own);
`--reset-cache step` also empties it between two ladder steps. It is a state change on the target,
so it is only ever done when asked for, and only on --host itself.

Each engine has its own way (docs/cache-control.md):
  - vLLM (and the built-in simulator): POST /reset_prefix_cache, registered only when the server
    runs with VLLM_SERVER_DEV_MODE=1 (404 otherwise); vLLM answers {"success": false} while
    running requests hold KV blocks;
  - SGLang: POST /flush_cache (HTTP 400 while requests are pending);
  - llama.cpp: POST /slots/{id}?action=erase for every slot GET /slots lists (501 unless
    llama-server runs with --slot-save-path). Its host-memory prompt cache (--cache-ram) has no
    endpoint: a reset leaves it, start llama-server with --cache-ram 0 for clean steps.

A reset is one `Reset` (ok / refused / not_supported / error, the HTTP status, why), logged in one
line and kept in the results (each ladder window's `cache_reset`). A server busy with requests
refuses a reset, so between two steps the ladder first stops sending and lets the last step's
requests finish (LadderReset), then asks until the server is idle, bounded by QUIET_S.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from llm_locust.analysis import server_metrics
from llm_locust.transport.probe import FetchError, fetch

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0  # one exchange with the server
BODY_BYTES = 1 << 20  # a reply of the reset endpoints (or /slots) is small: more is a broken server
ENDPOINTS = {
    "vllm": "POST /reset_prefix_cache",
    "sglang": "POST /flush_cache",
    "llama.cpp": "POST /slots/{id}?action=erase",
}
HINTS = {
    "vllm": "vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1 in its environment",
    "sglang": "SGLang's /flush_cache",
    "llama.cpp": "llama-server erases slots only when started with --slot-save-path DIR (and --slots)",
}


@dataclass
class Reset:
    """What one reset did: outcome "ok", "refused" (the server said no: `status`, `detail`),
    "not_supported" (no such endpoint, or an engine without one) or "error" (no answer)."""

    outcome: str
    engine: str | None
    endpoint: str
    status: int | None = None
    detail: str = ""
    seconds: float = 0.0
    busy: bool = False  # refused because requests were running: asking again later may succeed
    when: str = ""  # "before the run", "before step 3"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None) or k in ("outcome", "status")}

    def line(self) -> str:
        what = f"{self.engine or 'unknown server'} {self.endpoint}".strip()
        head = f"cache reset {self.when} ({what})" if self.when else f"cache reset ({what})"
        if self.outcome == "ok":
            return f"{head}: ok in {self.seconds:.2f} s" + (f"; {self.detail}" if self.detail else "")
        status = f" with HTTP {self.status}" if self.status is not None else ""
        return f"{head}: {self.outcome.replace('_', ' ')}{status}: {self.detail}"


# ---- which engine ----


def detect_engine(host: str, headers: dict[str, str]) -> str | None:
    """The engine behind `host`, from its /metrics names (analysis.server_metrics.detect; the
    simulator speaks vLLM's), else from what answers: llama.cpp's /props (total_slots), SGLang's
    /get_server_info, vLLM's /version. None when nothing says."""
    reply = _get(host, "/metrics", headers)
    if reply is not None and reply[0] == 200:
        try:
            kind = server_metrics.detect(server_metrics.samples(reply[1].decode("utf-8", "replace")).keys())
        except ValueError:  # not a Prometheus exposition
            kind = None
        kind = server_metrics.DIALECTS.get(kind or "", kind)
        if kind in ENDPOINTS:
            return kind
    for path, engine in (("/props", "llama.cpp"), ("/get_server_info", "sglang"), ("/version", "vllm")):
        doc = _get_json(host, path, headers)
        if isinstance(doc, dict) and (engine != "llama.cpp" or "total_slots" in doc):
            return engine
    return None


# ---- the reset ----


def reset(host: str, headers: dict[str, str], engine: str | None, when: str = "") -> Reset:
    """Empty `host`'s prefix cache the way `engine` does it (detect_engine first when None)."""
    t0 = time.monotonic()
    engine = engine or detect_engine(host, headers)
    if engine == "llama.cpp":
        r = _erase_slots(host, headers)
    elif engine in ENDPOINTS:
        r = _post_reset(host, headers, engine)
    else:
        r = Reset(
            "not_supported",
            engine,
            "",
            detail="the server's engine is not known (vLLM, SGLang or llama.cpp): its cache was left as it is",
        )
    r.seconds = round(time.monotonic() - t0, 3)
    r.when = when
    return r


def _post_reset(host: str, headers: dict[str, str], engine: str) -> Reset:
    endpoint = ENDPOINTS[engine]
    path = endpoint.split(" ", 1)[1]
    try:
        reply = fetch(host.rstrip("/") + path, method="POST", body=b"", headers=headers, **_limits())
    except (FetchError, OSError) as e:
        return Reset("error", engine, endpoint, detail=f"{type(e).__name__}: {e}")
    body = reply.body[:300].decode("utf-8", "replace").strip()
    if reply.status in (404, 405, 501):
        return Reset("not_supported", engine, endpoint, reply.status, f"{HINTS[engine]} ({body[:120]})")
    if reply.status != 200:
        busy = engine == "sglang" and reply.status == 400  # "Cache not flushed because there are pending requests"
        return Reset("refused", engine, endpoint, reply.status, body or "no reason given", busy=busy)
    doc = _json(reply.body)
    if isinstance(doc, dict) and doc.get("success") is False:  # vLLM >= 0.11: blocks still held by requests
        return Reset(
            "refused", engine, endpoint, 200, "the server said success=false: requests hold KV blocks", busy=True
        )
    return Reset("ok", engine, endpoint, 200)


def _erase_slots(host: str, headers: dict[str, str]) -> Reset:
    """llama.cpp: every slot of GET /slots erased, one POST each; the first refusal stops."""
    endpoint = ENDPOINTS["llama.cpp"]
    got = _get(host, "/slots", headers)
    if got is None:
        return Reset("error", "llama.cpp", endpoint, detail="GET /slots gave no reply")
    if got[0] != 200:
        hint = "llama-server lists its slots only with --slots (the default)"
        return Reset("not_supported", "llama.cpp", endpoint, got[0], f"GET /slots: {hint}")
    slots = _json(got[1])
    ids = (
        [s["id"] for s in slots if isinstance(s, dict) and isinstance(s.get("id"), int)]
        if isinstance(slots, list)
        else []
    )
    erased = 0
    for sid in ids:
        try:
            reply = fetch(
                f"{host.rstrip('/')}/slots/{sid}?action=erase",
                method="POST",
                body=b"{}",
                headers={**headers, "Content-Type": "application/json"},
                **_limits(),
            )
        except (FetchError, OSError) as e:
            return Reset("error", "llama.cpp", endpoint, detail=f"slot {sid}: {type(e).__name__}: {e}")
        if reply.status == 501:
            return Reset("not_supported", "llama.cpp", endpoint, 501, HINTS["llama.cpp"])
        if reply.status != 200:
            body = reply.body[:200].decode("utf-8", "replace").strip()
            busy = reply.status == 503 or any(s.get("is_processing") for s in slots if isinstance(s, dict))
            return Reset("refused", "llama.cpp", endpoint, reply.status, f"slot {sid}: {body}", busy=busy)
        doc = _json(reply.body)
        erased += doc.get("n_erased", 0) if isinstance(doc, dict) and isinstance(doc.get("n_erased"), int) else 0
    return Reset("ok", "llama.cpp", endpoint, 200, f"{len(ids)} slots, {erased} tokens erased")


def _limits() -> dict[str, Any]:
    return {"connect_timeout": TIMEOUT_S, "total": TIMEOUT_S, "body_bytes": BODY_BYTES, "truncate": True}


def _get(host: str, path: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
    try:
        r = fetch(host.rstrip("/") + path, headers=headers, **_limits())
    except (FetchError, OSError):
        return None
    return r.status, r.body


def _get_json(host: str, path: str, headers: dict[str, str]) -> Any:
    got = _get(host, path, headers)
    return _json(got[1]) if got is not None and got[0] == 200 else None


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


# ---- in a run ----


class Target:
    """The server a run resets: --host, the API's headers (its key), the engine once detected."""

    def __init__(self, host: str, headers: dict[str, str]) -> None:
        self.host = host
        self.headers = headers
        self.engine: str | None = None

    def reset(self, when: str) -> Reset:
        if self.engine is None:
            self.engine = detect_engine(self.host, self.headers)
        r = reset(self.host, self.headers, self.engine, when)
        say = log.info if r.outcome == "ok" else log.warning
        say("%s", r.line())
        return r

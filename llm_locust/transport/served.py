"""What a server says it serves: the models it lists and its context length.

One place asks these questions (issue 25): the users and the dispatcher ask `fetch_models` for the
model to send when no --model is given (and, with several endpoints, which endpoint serves which
model); `llm-locust run` asks `context_length` for --overlong-share's prompt length. A gRPC
server answers the same question on its own channel (the gRPC clients' `model_info`), and the
results' provenance keeps the server's whole /v1/models reply (transport/probe.py probe_server).

Every read here is bounded like every read outside the request path: the reply's head and body to
a size, the whole exchange to a time, and any failure is "not said" ([] or None), never an error.

This module imports no event loop at import time: `context_length` runs in the `llm-locust run`
process before Locust (and its gevent monkey-patching) is imported, so it reads with the standard
library in a thread of its own, abandoned at its deadline; `fetch_models` runs inside a Locust
process and reads with the gevent probe (transport/probe.py).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from typing import Any

from llm_locust.protocols.base import Limits, Timeouts
from llm_locust.protocols.openai import parse_models
from llm_locust.transport.probe import fetch

log = logging.getLogger(__name__)

CONTEXT_BODY_BYTES = 1 << 20  # a /v1/models or /props reply: more is not one


def fetch_models(base_url: str, headers: dict[str, str], timeouts: Timeouts, limits: Limits | None = None) -> list[str]:
    """Model ids the server lists at /v1/models; [] (with a warning) when it lists none.

    Bounded like every read outside the request path (transport/probe.fetch): the header block to
    limits.head_bytes, the body to limits.body_bytes, the whole exchange to min(total timeout,
    60 s); any failure is a warning and []."""
    lim = limits or Limits()
    url = base_url.rstrip("/") + "/v1/models"
    try:
        r = fetch(
            url,
            headers=headers,
            connect_timeout=timeouts.connect,
            total=min(timeouts.total, 60.0),
            head_bytes=lim.head_bytes,
            body_bytes=lim.body_bytes,
        )
        models = parse_models(r.body) if r.status == 200 else []
        if not models:
            log.warning("%s lists no model (HTTP %s); sending requests without one", url, r.status)
        return models
    except Exception as e:  # noqa: BLE001 - any failure here only costs the model name
        log.warning("could not list models at %s: %s", url, e)
        return []


def context_length(host: str, api_key: str | None = None, timeout: float = 5.0) -> int | None:
    """The server's context in tokens: /v1/models `max_model_len` (vLLM, the simulator), else
    llama.cpp's /props `n_ctx` (top level or in default_generation_settings); None when neither
    says. Each read takes at most `timeout` seconds and CONTEXT_BODY_BYTES bytes."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    doc = _get_json(host.rstrip("/") + "/v1/models", headers, timeout)
    for m in (doc or {}).get("data") or [] if isinstance(doc, dict) else []:
        if isinstance(m, dict) and isinstance(m.get("max_model_len"), int) and m["max_model_len"] > 0:
            return m["max_model_len"]
    props = _get_json(host.rstrip("/") + "/props", headers, timeout)
    if isinstance(props, dict):
        for d in (props, props.get("default_generation_settings") or {}):
            if isinstance(d, dict) and isinstance(d.get("n_ctx"), int) and d["n_ctx"] > 0:
                return d["n_ctx"]
    return None


def _get_json(url: str, headers: dict[str, str], timeout: float) -> Any:
    """GET url's JSON, or None: on any failure, a body over CONTEXT_BODY_BYTES, or no whole reply
    within `timeout` (a server that drips its head or body is left to its thread, which ends at
    its socket's next timeout, and is not waited for)."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout

    def read() -> None:
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - the user's own target
                body = bytearray()
                while len(body) <= CONTEXT_BODY_BYTES and time.monotonic() < deadline:
                    piece = r.read1(65536)
                    if not piece:
                        out.append(json.loads(body))
                        return
                    body += piece
        except Exception:  # noqa: BLE001 - a server without that endpoint, or a broken one
            return

    t = threading.Thread(target=read, name="context-length", daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else None

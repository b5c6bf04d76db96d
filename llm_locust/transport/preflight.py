"""Before any load: does the target answer, and is it the kind of server the API expects?

One bounded GET of the API's own probe endpoint. A refused connection, a timeout or an HTML page
stops the run with one line (exit 3); a host ending in /v1 for an OpenAI-style API stops it with
the fix (exit 2: the paths already start with /v1, every request would go to /v1/v1/...). A 404
or 405 on the probe is only a warning: some servers serve the API without it.

Then the API's own endpoint is asked, with an empty JSON object (a request no server generates
from: it answers 400 or 422 where the endpoint exists): a 404 there means the server does not
serve this API (an old vLLM without /v1/responses, a server started without --embeddings):
stop, exit 3, naming the API and the endpoint. Under --mix the kinds' endpoints (/v1/embeddings,
/v1/rerank, /v1/score) are asked the same way, and the --api's own only when some requests are
left to it (a pooling-only server, vLLM --runner pooling, has no /v1/chat/completions).

Bounded like every read of a server outside the request path (transport/probe.py `fetch`): each
exchange may take --connect-timeout to connect, then REPLY_S (5 s, not an option: a server that
answers at all answers these in milliseconds) for the whole reply; only the first MAX_BODY bytes of
a body are read, a header block over MAX_HEAD bytes is a broken reply. A server that stalls, drips
or floods stops the run (the first probe) or is left to the run (the API's own endpoint) within
those few seconds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from llm_locust.protocols import GRPC_APIS, JSON_API_NAMES, OPENAI_APIS, get_adapter, get_json_adapter
from llm_locust.protocols.base import MAX_HEAD_BYTES, PROBE_HEADER, RequestSpec, Timeouts
from llm_locust.transport.grpc_h2 import H2GrpcClient
from llm_locust.transport.probe import Reply, fetch

log = logging.getLogger(__name__)

PROBES = {
    "tgi": "/info",
    "triton": "/v2/health/ready",
    "llamacpp": "/health",
    "sglang-generate": "/health",
    "ollama-generate": "/api/tags",
    "ollama-chat": "/api/tags",
}  # the rest: /v1/models
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
MAX_BODY = 65536  # enough to tell an HTML page or a JSON error; the rest is not read
MAX_HEAD = MAX_HEAD_BYTES
REPLY_S = 5.0  # the whole reply, once connected: a server that answers at all does within it
MIX_APIS = {"embeddings": "openai-embeddings", "rerank": "rerank", "score": "vllm-score"}  # --mix kind -> API


def endpoint_apis(api: str, mix: dict[str, float] | None) -> list[str]:
    """The APIs whose endpoints a run will use: the --api's unless --mix gives every request to
    other kinds, then those kinds'."""
    mix = {k: v for k, v in (mix or {}).items() if v > 0}
    own = [api] if 1.0 - sum(mix.values()) > 1e-9 else []
    return own + [MIX_APIS[k] for k in mix]


@dataclass(frozen=True)
class Problem:
    code: int
    message: str


def check(
    host: str,
    api: str,
    headers: dict[str, str],
    connect_timeout: float,
    total: float = REPLY_S,
    endpoints: list[str] | None = None,
) -> Problem | None:
    """None when the target looks right; else why not and the exit code. `endpoints`: the APIs
    whose endpoints are asked (default: `api`'s; see endpoint_apis). Each exchange: at most
    `connect_timeout` to connect, then `total` for the reply."""
    if api in GRPC_APIS:
        return _grpc(host, connect_timeout, total)
    base = urlsplit(host).path.rstrip("/")
    if api in OPENAI_APIS and base.endswith("/v1"):
        return Problem(
            EXIT_USAGE,
            f"--host {host} ends with /v1, and the {api} API's paths start with /v1: requests "
            f"would go to {base}/v1/...; drop /v1 from --host",
        )
    url = f"{host.rstrip('/')}{PROBES.get(api, '/v1/models')}"
    try:
        r = _exchange(url, "GET", None, headers, connect_timeout, total)
    except Exception as e:  # noqa: BLE001 - any failure to get an answer is the same verdict
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        return Problem(EXIT_UNREACHABLE, f"cannot reach {url}: {reason} (is the server up, and is --host right?)")
    problem = _judge(url, api, r)
    if problem is not None:
        return problem
    for name in endpoints if endpoints is not None else [api]:
        problem = _endpoint(host, name, headers, connect_timeout, total)
        if problem is not None:
            return problem
    return None


def _exchange(
    url: str, method: str, body: bytes | None, headers: dict[str, str], connect_timeout: float, total: float
) -> Reply:
    """One bounded exchange: connecting within `connect_timeout`, the reply within `total` more.
    It says it is a probe (PROBE_HEADER): `trace record` in front of the server records no line of it."""
    return fetch(
        url,
        method=method,
        body=body,
        headers={**headers, PROBE_HEADER: "preflight"},
        connect_timeout=connect_timeout,
        total=total,
        head_bytes=MAX_HEAD,
        body_bytes=MAX_BODY,
        truncate=True,
    )


def _judge(url: str, api: str, r: Reply) -> Problem | None:
    """The probe's answer: an HTML page stops the run; a 404/405 or 401/403 is a warning."""
    if "html" in r.content_type.lower() or r.body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return Problem(
            EXIT_UNREACHABLE,
            f"{url} answered with an HTML page (HTTP {r.status}), not the {api} API: "
            "is --host an LLM inference server, and is --api right?",
        )
    if r.status in (404, 405):
        log.warning("%s answered HTTP %d: going on (the server may serve the %s API without it)", url, r.status, api)
    elif r.status in (401, 403):
        log.warning("%s answered HTTP %d: is the key right (--api-key-env)?", url, r.status)
    return None


def _grpc(host: str, connect_timeout: float, total: float) -> Problem | None:
    """A gRPC server answers GetModelInfo within the connect timeout and `total` more."""
    client = H2GrpcClient(
        host, timeouts=Timeouts(connect=connect_timeout, no_progress=total, total=connect_timeout + total)
    )
    try:
        client.model_info()
    except Exception as e:  # noqa: BLE001 - any failure to get an answer is the same verdict
        return Problem(
            EXIT_UNREACHABLE,
            f"cannot reach the gRPC server at {host}: {type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else ''} (is it up, and is --host right?)",
        )
    finally:
        client.close()
    return None


def _endpoint(host: str, api: str, headers: dict[str, str], connect_timeout: float, total: float) -> Problem | None:
    if api in JSON_API_NAMES:
        path, _body = get_json_adapter(api).request(RequestSpec(model="m"))
    else:
        path, _body = get_adapter(api).request(
            RequestSpec(model="m", prompt="x", messages=[{"role": "user", "content": "x"}], max_tokens=1)
        )
    url = host.rstrip("/") + path
    try:
        r = _exchange(url, "POST", b"{}", {**headers, "Content-Type": "application/json"}, connect_timeout, total)
    except Exception as e:  # noqa: BLE001 - the first probe answered: leave the verdict to the run
        log.warning("%s did not answer the preflight (%s): going on", url, e)
        return None
    if r.status == 404:
        return Problem(
            EXIT_UNREACHABLE,
            f"{host.rstrip('/')}{path} answered 404: the server does not serve the {api} "
            "API there; is --api right (and the server started with that endpoint on)?",
        )
    return None

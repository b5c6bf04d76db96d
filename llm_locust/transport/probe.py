"""Reads of a server's bytes outside the request path, each bounded in size and time.

`fetch` is the one way the runtime reads a server outside its requests: the start-of-test probe
below, the preflight (transport/preflight.py) and the /metrics scrapers (transport/scraper.py) use it.
Like the request path (transport/http.py, protocols/base.py `Limits`), a reply's header block and
body have size limits, the whole exchange a deadline, and every read yields to the event loop, so
that a server sending an endless body, endless headers, a byte a second or nothing at all costs
at most the deadline and a bounded buffer, never the run's timing or memory. The deadline is a
gevent timer: it can fire only because the read loop yields.

`probe_server` asks which models and which version answer, best effort: a server that does not
answer one of these endpoints only costs that fact. The endpoint tables live with the other
provenance facts (report.provenance)."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import gevent
import gevent.socket
import gevent.ssl
import orjson
from geventhttpclient.response import HTTPParseError, HTTPResponse

from llm_locust.protocols.base import MAX_BODY_BYTES, MAX_HEAD_BYTES
from llm_locust.report.provenance import MODEL_FIELDS, VERSION_ENDPOINTS

READ_SIZE = 65536
_YIELD_SLEEP = 1e-6  # a timer, not sleep(0): the hub then runs a loop iteration (timers fire)
PROBE_TIMEOUT_S = 3.0  # one probe endpoint's whole exchange
PROBE_BUDGET_S = 10.0  # all of them together


class FetchError(Exception):
    """A read that did not give a whole reply; the text says why."""


class LimitError(FetchError):
    """A read stopped at one of its limits (a size or the deadline): the server is hostile or broken."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str  # "" when absent; a header sent twice: its values joined
    truncated: bool = False  # the body was cut at the caller's limit (fetch(..., truncate=True))


def fetch(
    url: str,
    *,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    connect_timeout: float = PROBE_TIMEOUT_S,
    total: float = PROBE_TIMEOUT_S,
    head_bytes: int = MAX_HEAD_BYTES,
    body_bytes: int = MAX_BODY_BYTES,
    truncate: bool = False,
) -> Reply:
    """One HTTP/1.1 exchange with `url` (its path and query as written; user:password in it is
    sent as Basic auth, never in the Host header), on a connection of its own, closed after.

    Raises FetchError when connecting takes over `connect_timeout`, the rest of the exchange (TLS,
    request, whole reply) over `total` seconds, the header block is over `head_bytes` or the body
    over `body_bytes` (with `truncate`: the first `body_bytes` are returned instead), or the
    connection breaks; OSError for a refused connection."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {parts.scheme or '?'}://{parts.hostname or '?'}")
    sock = _connect(parts, connect_timeout)
    timer = gevent.Timeout(total, LimitError(f"no complete reply within {total:g}s"))
    timer.start()
    try:
        if parts.scheme == "https":
            ctx = gevent.ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = gevent.ssl.CERT_NONE  # as the request path: insecure, it measures
            sock = ctx.wrap_socket(sock, server_hostname=parts.hostname)
        sock.sendall(_request(parts, method, body, headers))
        return _read_reply(sock, method, head_bytes, body_bytes, truncate)
    finally:
        timer.close()
        sock.close()


def _connect(parts, timeout: float):
    port = parts.port or (443 if parts.scheme == "https" else 80)
    with gevent.Timeout(timeout, LimitError(f"could not connect within {timeout:g}s")):
        sock = gevent.socket.create_connection((parts.hostname, port))  # name lookup included
    sock.settimeout(None)  # the rest of the exchange is under fetch's timer
    return sock


def _request(parts, method: str, body: bytes | None, headers: dict[str, str] | None) -> bytes:
    host = parts.netloc.rpartition("@")[2]
    head = {"Host": host, "User-Agent": "llm-locust", "Accept-Encoding": "identity", "Connection": "close"}
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        head["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    head.update(headers or {})
    if body is not None:
        head["Content-Length"] = str(len(body))
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"{method} {target} HTTP/1.1\r\n{lines}\r\n".encode("latin-1") + (body or b"")


def _read_reply(sock, method: str, head_bytes: int, body_bytes: int, truncate: bool) -> Reply:
    """Reads until the reply is whole, yielding after every read; bounded by the sizes given."""
    resp = HTTPResponse(method=method)
    fed = 0
    # body bytes count against body_bytes; anything else after the head (chunk framing) against head_bytes
    cap = head_bytes + body_bytes + head_bytes
    while True:
        data = sock.recv(READ_SIZE)
        gevent.sleep(_YIELD_SLEEP)  # a server that floods us must not keep the other greenlets waiting
        if not data:
            if resp.headers_complete and resp.get_code() >= 200 and _close_delimited(resp):
                break
            raise FetchError("connection closed before the end of the reply")
        fed += len(data)
        try:
            resp.feed(data)
        except HTTPParseError as e:
            raise FetchError(f"invalid HTTP reply: {e.args[0] if e.args else e}") from None
        final = resp.headers_complete and resp.get_code() >= 200
        if not final and fed > head_bytes:
            raise LimitError(f"header block over {head_bytes} bytes")
        if len(resp._body_buffer) > body_bytes:
            if truncate:
                return _reply(resp, bytes(resp._body_buffer[:body_bytes]), truncated=True)
            raise LimitError(f"reply over {body_bytes} bytes")
        if final and resp.message_complete:
            break
        if fed > cap:
            raise LimitError(f"invalid HTTP reply: over {fed - len(resp._body_buffer)} bytes of framing")
    return _reply(resp, bytes(resp._body_buffer))


def _close_delimited(resp: HTTPResponse) -> bool:
    te = resp.get("transfer-encoding") or ""
    te = ", ".join(te) if isinstance(te, list) else te
    return resp.get("content-length") is None and "chunked" not in te.lower()


def _reply(resp: HTTPResponse, body: bytes, truncated: bool = False) -> Reply:
    ctype = resp.get("content-type") or ""
    return Reply(resp.get_code(), body, ", ".join(ctype) if isinstance(ctype, list) else ctype, truncated)


def _get_json(url: str, headers: dict[str, str], timeout: float, body_bytes: int) -> Any:
    r = fetch(url, headers=headers, connect_timeout=timeout, total=timeout, body_bytes=body_bytes)
    if r.status != 200:
        return None
    try:
        return orjson.loads(r.body)
    except orjson.JSONDecodeError:
        return None


def probe_server(
    base_url: str,
    headers: dict[str, str] | None = None,
    timeout: float = PROBE_TIMEOUT_S,
    budget: float = PROBE_BUDGET_S,
    body_bytes: int = MAX_BODY_BYTES,
) -> dict[str, Any]:
    """{"models": [...], "version": {...}, "version_endpoint": path} from what the server answers.

    Each endpoint gets `timeout` seconds and `body_bytes` of reply, all of them `budget` seconds.
    A reply that meets a limit is noted in "error" and ends the probe (a server that floods or
    stalls one endpoint is not asked the others); a missing endpoint is only not this server's."""
    out: dict[str, Any] = {"models": [], "version": None, "version_endpoint": None}
    base = base_url.rstrip("/")
    end = time.monotonic() + budget

    def get(path: str) -> Any:
        left = end - time.monotonic()
        if left <= 0:
            raise LimitError(f"the probe's {budget:g}s were spent")
        return _get_json(base + path, headers or {}, min(timeout, left), body_bytes)

    try:
        doc = get("/v1/models")
        rows = doc.get("data") if isinstance(doc, dict) else None
        out["models"] = [{k: m[k] for k in MODEL_FIELDS if k in m} for m in rows or [] if isinstance(m, dict)]
    except LimitError as e:
        out["error"] = f"/v1/models: {e}"
        return out
    except Exception as e:  # noqa: BLE001 - a bad URL or a broken reply only costs the facts
        out["error"] = f"/v1/models: {type(e).__name__}: {e}"
    for path, fields in VERSION_ENDPOINTS:
        try:
            doc = get(path)
        except LimitError as e:
            out["error"] = f"{path}: {e}"
            break
        except Exception:  # noqa: BLE001 - not this server's endpoint
            continue
        if isinstance(doc, dict) and any(f in doc for f in fields):
            out["version"] = {f: doc[f] for f in fields if f in doc and not isinstance(doc[f], (dict, list))}
            out["version_endpoint"] = path
            break
    return out

"""`llm-locust trace record`: a streaming-transparent HTTP/1.1 reverse proxy that records a trace.

Put it in front of an OpenAI-compatible server; every request (any method and path) is
forwarded with its headers (Authorization included) and the reply is relayed as it arrives:
a chunked upstream body goes to the client with its own chunk framing, byte for byte; other
bodies are passed through (re-framed as chunks only when the upstream ends its body by closing).
A copy of each generation reply (POST /v1/completions, /v1/chat/completions) is parsed on the
side for its usage, and one JSON line per request is appended to the trace when the reply ends:

    timestamp, input_tokens[, input_tokens_estimated], output_tokens[, output_tokens_estimated],
    [conversation_id, turn], hash_ids, block_size, model, api, status[, error][, prompt | messages]

Prompt text is stored only with --store-text; header values never (conversation ids taken from
headers or the body's `user` are stored as pseudonyms conv-1, conv-2...). Lines are written in the
order replies END (each flushed at once), so timestamps (request arrival) are not sorted.

Stdlib asyncio streams only; one upstream connection per client connection, kept alive on both
sides. See docs/recording.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import sys
import time
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

from llm_locust.protocols.base import PROBE_HEADER
from llm_locust.protocols.sse import SSEDecoder
from llm_locust.workload.paths import output_problem
from llm_locust.workload.prefix_hash import (
    CHARS_PER_TOKEN,
    CHAT,
    COMPLETIONS,
    DEFAULT_BLOCK_SIZE,
    PrefixHasher,
    Pseudonyms,
    TokenizerError,
    load_tokenizer,
    request_text,
)

PROG = "llm-locust trace record"
MAX_HEAD = 64 * 1024  # request/response head limit
MAX_BODY = 256 << 20  # request body limit
MAX_EVENT = 16 << 20  # one SSE event, or a non-streamed reply body, is parsed up to this size
INFLATE_STEP = 256 << 10  # a compressed reply's copy is inflated this much at a time
SSE_FLUSH = 1 << 20  # SSE bytes held back at most this long without a blank line
READ_SIZE = 64 * 1024
GEN_PATHS = {"/v1/completions": COMPLETIONS, "/v1/chat/completions": CHAT}
# hop-by-hop headers (RFC 9110 7.6.1) and those the proxy sets itself
REQ_DROP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "expect",
}
RESP_DROP = {"connection", "keep-alive", "proxy-connection", "upgrade"}
CONV_HEADERS = ("x-conversation-id", "x-session-id")


class ProtocolError(Exception):
    """Malformed HTTP from the client or the upstream."""


class ClientGone(Exception):
    pass


class UpstreamFailed(Exception):
    """The upstream connection failed; `sent` tells whether the client already got bytes."""

    def __init__(self, msg: str, sent: bool):
        super().__init__(msg)
        self.sent = sent


# -- HTTP pieces ----------------------------------------------------------------------------


def parse_head(raw: bytes) -> tuple[str, list[tuple[str, str]], dict[str, str]]:
    """(start line, [(name, value)] as sent, {lower name: value, repeats joined by ', '})."""
    lines = raw.decode("latin-1").split("\r\n")
    start = lines[0]
    headers: list[tuple[str, str]] = []
    low: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t":
            raise ProtocolError("obsolete header line folding")
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"malformed header line {line[:40]!r}")
        value = value.strip()
        headers.append((name, value))
        k = name.lower()
        low[k] = f"{low[k]}, {value}" if k in low else value
    return start, headers, low


def tokens(value: str | None) -> list[str]:
    return [t.strip().lower() for t in (value or "").split(",") if t.strip()]


class ChunkedDecoder:
    """Incremental `Transfer-Encoding: chunked` parser that finds the end of the body and its data.

    feed(piece) -> (bytes of `piece` that belong to this body, [data pieces]). The raw bytes are
    what the proxy forwards (the framing unchanged); the data pieces go to the tee.
    """

    __slots__ = ("state", "line", "remaining", "done")
    SIZE, DATA, DATA_END, TRAILER = range(4)

    def __init__(self) -> None:
        self.state = self.SIZE
        self.line = b""
        self.remaining = 0
        self.done = False

    def feed(self, data: bytes) -> tuple[int, list[bytes]]:
        i, n, out = 0, len(data), []
        while i < n and not self.done:
            if self.state == self.DATA:
                take = min(self.remaining, n - i)
                out.append(data[i : i + take])
                i += take
                self.remaining -= take
                if not self.remaining:
                    self.state = self.DATA_END
                continue
            j = data.find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                if len(self.line) > MAX_HEAD:
                    raise ProtocolError("chunk size or trailer line too long")
                return n, out
            line = (self.line + data[i:j]).rstrip(b"\r") if self.line else data[i:j].rstrip(b"\r")
            self.line = b""
            i = j + 1
            if self.state == self.SIZE:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
                if size < 0:
                    raise ProtocolError("negative chunk size")
                if size:
                    self.remaining, self.state = size, self.DATA
                else:
                    self.state = self.TRAILER
            elif self.state == self.DATA_END:
                if line:
                    raise ProtocolError("chunk data longer than its size")
                self.state = self.SIZE
            elif not line:  # TRAILER: the blank line ends the body
                self.done = True
        return i, out


async def read_request_body(reader: asyncio.StreamReader, low: dict[str, str]) -> bytes:
    if "chunked" in tokens(low.get("transfer-encoding")):
        parts: list[bytes] = []
        size = 0
        while True:
            line = (await reader.readuntil(b"\n")).rstrip(b"\r\n")
            try:
                n = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
            if n < 0:
                raise ProtocolError("negative chunk size")
            if n == 0:
                while (await reader.readuntil(b"\n")).strip():  # trailer fields, up to the blank line
                    pass
                return b"".join(parts)
            size += n
            if size > MAX_BODY:
                raise ProtocolError("request body too large")
            parts.append(await reader.readexactly(n))
            if (await reader.readuntil(b"\n")).strip():
                raise ProtocolError("chunk data longer than its size")
    declared = low.get("content-length")
    if declared is None:
        return b""
    try:
        size = int(declared)
    except ValueError:
        raise ProtocolError("bad Content-Length") from None
    if size < 0 or size > MAX_BODY:
        raise ProtocolError("bad or too large Content-Length")
    return await reader.readexactly(size) if size else b""


# -- the trace side -------------------------------------------------------------------------


@dataclass(slots=True)
class Upstream:
    scheme: str
    host: str
    port: int
    base: str  # path prefix, no trailing slash
    host_header: str
    ssl: ssl.SSLContext | None

    @classmethod
    def parse(cls, url: str) -> Upstream:
        u = urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"bad upstream URL {url!r} (expected http://HOST:PORT[/PATH])")
        port = u.port or (443 if u.scheme == "https" else 80)
        ctx = ssl.create_default_context() if u.scheme == "https" else None
        return cls(u.scheme, u.hostname, port, u.path.rstrip("/"), u.netloc.rpartition("@")[2], ctx)


class ResponseTee:
    """Parses a copy of a generation reply: usage, token-bearing chunks, error events.

    Never raises and holds a bounded amount of memory, whatever the upstream sends: one event (or
    a non-streamed JSON body) is parsed up to `max_event` bytes, a compressed reply is inflated a
    step at a time. What it cannot understand (an event that is not JSON, `choices` that is not a
    list, a bad `usage`) is skipped and the first such problem kept in `parse_error` for the trace
    line; a size cap or an inflate error stops the parsing of that reply. The relay is never affected."""

    __slots__ = (
        "sse",
        "decoder",
        "buf",
        "size",
        "usage",
        "chunks",
        "error",
        "text_chars",
        "inflate",
        "max_event",
        "parse_error",
        "stopped",
        "_pending",
        "_pending_size",
        "_held",
        "_tail",
    )

    def __init__(self, content_type: str, content_encoding: str = "", max_event: int = MAX_EVENT):
        self.sse: bool | None = True if "event-stream" in content_type else None
        enc = content_encoding.strip().lower()
        # a compressed reply is relayed as it is; the copy is inflated for parsing
        self.inflate = zlib.decompressobj(47) if enc in ("gzip", "x-gzip", "deflate") else None
        self.decoder = SSEDecoder()
        self.buf: list[bytes] = []
        self.size = 0
        self.usage: dict | None = None
        self.chunks = 0
        self.error = False
        self.text_chars = 0
        self.max_event = max_event
        self.parse_error: str | None = None
        self.stopped = False  # parsing given up (a cap, an inflate error)
        self._pending: list[bytes] = []  # SSE bytes not yet given to the decoder (no blank line in them)
        self._pending_size = 0
        self._held = 0  # bytes since the last blank line (held by the decoder or pending)
        self._tail = b""  # the last 2 bytes seen (a blank line may straddle two pieces)

    def _give_up(self, why: str) -> None:
        if self.parse_error is None:
            self.parse_error = why
        self.stopped = True
        self.inflate = None
        self.sse = False
        self.buf, self._pending, self.decoder = [], [], SSEDecoder()

    def feed(self, data: bytes) -> None:
        if self.stopped or not data:
            return
        try:
            if self.inflate is None:
                self._feed(data)
                return
            d = self.inflate
            while data and not self.stopped:
                out = d.decompress(data, INFLATE_STEP)  # bounded output: a small gzip can inflate to GBs
                data = d.unconsumed_tail
                if out:
                    self._feed(out)
        except zlib.error as e:
            self._give_up(f"cannot inflate the compressed reply: {e}")
        except Exception as e:  # noqa: BLE001 (whatever the upstream sends, the relay goes on)
            self._give_up(f"cannot parse the reply: {type(e).__name__}: {e}"[:300])

    def _feed(self, data: bytes) -> None:
        if self.sse is None:  # no event-stream content type: sniff the first bytes
            self.sse = data.lstrip()[:5] == b"data:"
        if self.sse:
            self._feed_sse(data)
            return
        self.size += len(data)
        if self.size > self.max_event:
            self._give_up(f"reply body over {self.max_event} bytes: not parsed")
        else:
            self.buf.append(data)

    def _feed_sse(self, data: bytes) -> None:
        # The decoder copies what it holds on every feed: pieces are held back until a blank line
        # may have ended an event (or 1 MiB piled up), so a long event costs a few copies, not one
        # per piece, and an event over max_event is refused before it is all in memory.
        look = self._tail + data
        self._tail = look[-2:]
        ends = max(look.rfind(b"\n\n"), look.rfind(b"\r\r"), look.rfind(b"\n\r"))
        if ends < 0:
            self._held += len(data)
        else:
            self._held = len(look) - ends - 2
        if self._held > self.max_event:
            self._give_up(f"an event over {self.max_event} bytes: not parsed")
            return
        self._pending.append(data)
        self._pending_size += len(data)
        if ends < 0 and self._pending_size < SSE_FLUSH:
            return
        piece = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_size = [], 0
        for payload in self.decoder.feed(piece):
            self._event(payload)

    def finish(self) -> None:
        if self.stopped:
            return
        try:
            self._finish()
        except Exception as e:  # noqa: BLE001
            self._give_up(f"cannot parse the reply: {type(e).__name__}: {e}"[:300])

    def _finish(self) -> None:
        if self.sse:
            if self._pending:
                for payload in self.decoder.feed(b"".join(self._pending)):
                    self._event(payload)
                self._pending = []
            for payload in self.decoder.close():
                self._event(payload)
        elif self.buf:
            body = b"".join(self.buf)
            self.buf = []
            try:
                obj = orjson.loads(body)
            except orjson.JSONDecodeError as e:
                if body.strip():
                    self.parse_error = f"reply is not JSON: {e}"[:300]
                return
            if not isinstance(obj, dict):
                self.parse_error = f"reply is JSON {type(obj).__name__}, not an object"
                return
            self._usage(obj)
            if "error" in obj:
                self.error = True
            for c in self._choices(obj):
                m = c.get("message")
                t = m.get("content") if isinstance(m, dict) else c.get("text")
                if isinstance(t, str):
                    self.text_chars += len(t)

    def _choices(self, obj: dict) -> list:
        c = obj.get("choices")
        if c is None:
            return []
        if type(c) is not list or not all(type(x) is dict for x in c):
            if self.parse_error is None:
                self.parse_error = (
                    f"'choices' is not a list of objects: {orjson.dumps(c)[:60].decode(errors='replace')}"
                )
            return []
        return c

    def _usage(self, obj: dict) -> None:
        u = obj.get("usage")
        if u is None:
            return
        ok = (
            isinstance(u, dict)
            and _count(u.get("completion_tokens"))
            and (u.get("prompt_tokens") is None or _count(u.get("prompt_tokens")))
        )
        if ok:
            self.usage = u  # the last one wins (continuous usage stats repeat it on every chunk)
        elif self.parse_error is None:
            self.parse_error = f"unusable 'usage': {orjson.dumps(u)[:80].decode(errors='replace')}"

    def _event(self, payload: bytes) -> None:
        if payload == b"[DONE]":
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            if self.parse_error is None and payload.strip():
                self.parse_error = f"an event is not JSON: {e}"[:300]
            return
        if not isinstance(obj, dict):
            if self.parse_error is None:
                self.parse_error = f"an event is JSON {type(obj).__name__}, not an object"
            return
        if "usage" in obj:
            self._usage(obj)
        if "error" in obj:
            self.error = True
        for c in self._choices(obj):
            if _token_bearing(c):
                self.chunks += 1


def _count(v) -> bool:
    return type(v) is int and 0 <= v <= 2**31 - 1


def _token_bearing(choice: dict) -> bool:
    d = choice.get("delta")
    if isinstance(d, dict):
        return bool(d.get("content") or d.get("reasoning_content") or d.get("reasoning") or d.get("tool_calls"))
    return bool(choice.get("text"))


class Recorder:
    """The trace file and the per-recording state (block ids, conversation pseudonyms and turns)."""

    def __init__(self, path: str, hasher: PrefixHasher, store_text: bool, force: bool = False):
        why = output_problem(path)
        if why is not None:  # --force or not: never through a link, never into a pipe or a device
            raise FileExistsError(f"{path}: {why}; give a file path")
        if not force and os.path.exists(path) and os.path.getsize(path) > 0:
            raise FileExistsError(f"{path} exists and is not empty (use --force to overwrite)")
        self.f = open(path, "wb", buffering=0)  # one write() per line: a crash loses no finished line
        self.path = path
        self.hasher = hasher
        self.store_text = store_text
        self.t0 = time.monotonic()
        self.convs = Pseudonyms()
        self.turns: dict[str, int] = {}
        self.lines = 0

    def conversation(self, raw: str) -> tuple[str, int]:
        cid = self.convs.get(raw)
        self.turns[cid] = turn = self.turns.get(cid, 0) + 1
        return cid, turn

    def write(self, entry: dict, digests: list[bytes]) -> None:
        entry["hash_ids"] = self.hasher.intern(digests)
        entry["block_size"] = self.hasher.block_size
        self.f.write(orjson.dumps(entry) + b"\n")
        self.lines += 1

    def close(self) -> None:
        self.f.close()


class Exchange:
    """What is known about one generation request, turned into a trace line at its end."""

    def __init__(self, rec: Recorder, api: str, t_arrival: float, body: bytes, low: dict[str, str]):
        self.rec, self.api, self.t = rec, api, t_arrival
        self.status = 0
        self.error: str | None = None
        self.tee: ResponseTee | None = None
        self.text: str | list[int] | None = None
        self.req: dict | None = None
        self.conv: tuple[str, int] | None = None
        try:
            req = orjson.loads(body)
            self.req = req if isinstance(req, dict) else None
        except orjson.JSONDecodeError:
            pass
        raw = next((low[h] for h in CONV_HEADERS if low.get(h)), None)
        if raw is None and self.req is not None and isinstance(self.req.get("user"), str) and self.req["user"]:
            raw = self.req["user"]
        if raw is not None:
            self.conv = rec.conversation(raw)  # counted at arrival, so turns follow request order
        self.digests: list[bytes] = []
        self.n_in = 0
        self.analysed = False

    def analyse(self) -> None:
        """Render and hash the prompt (may run in a worker thread with a tokenizer)."""
        self.analysed = True
        if self.req is None:
            return
        self.text = request_text(self.api, self.req.get("prompt"), self.req.get("messages"))
        if self.text is not None:
            self.digests, self.n_in, _ = self.rec.hasher.digests(self.text)

    def finish(self) -> None:
        tee, rec = self.tee, self.rec
        if tee is not None:
            tee.finish()
        usage = tee.usage if tee is not None else None
        e: dict = {"timestamp": round(self.t, 6)}
        if usage is not None and isinstance(usage.get("prompt_tokens"), int):
            e["input_tokens"] = usage["prompt_tokens"]
        else:
            e["input_tokens"], e["input_tokens_estimated"] = self.n_in, True
        if usage is not None:
            e["output_tokens"] = usage["completion_tokens"]
        else:
            n = tee.chunks if tee is not None else 0
            if tee is not None and not tee.sse and tee.text_chars:
                n = max(1, -(-tee.text_chars // CHARS_PER_TOKEN))
            e["output_tokens"], e["output_tokens_estimated"] = n, True
        if self.conv is not None:
            e["conversation_id"], e["turn"] = self.conv
        req = self.req or {}
        if isinstance(req.get("model"), str):
            e["model"] = req["model"]
        e["api"] = self.api
        e["status"] = self.status
        err = self.error or ("error event in the stream" if tee is not None and tee.error else None)
        if err:
            e["error"] = err
        if tee is not None and tee.parse_error:
            e["parse_error"] = tee.parse_error  # relayed as it came, but not understood: counts are estimates
            e["output_tokens_estimated"] = True
        if rec.store_text:
            key = "messages" if self.api == CHAT else "prompt"
            if key in req:
                e[key] = req[key]
        rec.write(e, self.digests)


# -- the proxy ------------------------------------------------------------------------------


class Proxy:
    def __init__(
        self, upstream: Upstream, recorder: Recorder, connect_timeout: float = 10.0, max_event: int = MAX_EVENT
    ):
        self.up = upstream
        self.rec = recorder
        self.connect_timeout = connect_timeout
        self.max_event = max_event
        self.tasks: set[asyncio.Task] = set()
        self.use_thread = recorder.hasher.tokenizer is not None

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a client handler always runs as a task
        self.tasks.add(task)
        conn = _UpConn()
        try:
            while await self._one(reader, writer, conn):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ClientGone):
            pass
        except asyncio.CancelledError:  # the proxy stops: the task ends as done, since Python 3.11's
            pass  # stream callback logs a traceback for a handler task that ends cancelled
        except Exception as e:  # noqa: BLE001 (one connection's bug must not take the proxy down)
            print(f"{PROG}: internal error on a connection: {e!r}", file=sys.stderr, flush=True)
        finally:
            conn.close()
            writer.close()
            self.tasks.discard(task)

    async def _one(self, reader, writer, conn: _UpConn) -> bool:
        """Serves one request; False when the client connection must close."""
        req = await self._read_request(reader, writer)
        if req is None:
            return False
        t_arrival, method, target, version, headers, low, body = req
        ctoks = tokens(low.get("connection"))
        keep = "close" not in ctoks and (version == "HTTP/1.1" or "keep-alive" in ctoks)
        http10 = version == "HTTP/1.0"

        path = target.split("?", 1)[0]
        # a preflight's probe (an empty request asking whether the endpoint exists) is no workload
        api = GEN_PATHS.get(path) if method == "POST" and PROBE_HEADER.lower() not in low else None
        ex = Exchange(self.rec, api, t_arrival, body, low) if api else None
        req_bytes = self._forwarded(method, target, headers, ctoks, body)
        try:
            try:
                return await self._exchange(reader, writer, conn, method, req_bytes, ex, keep, http10)
            except UpstreamFailed as e:
                return await self._upstream_failed(writer, conn, ex, e, keep)
            except ClientGone:
                conn.close()  # stops the generation upstream
                if ex is not None:
                    ex.error = "client disconnected"
                raise
            except asyncio.CancelledError:
                if ex is not None:
                    ex.error = ex.error or "recorder stopped"
                raise
        finally:
            if ex is not None:
                _record(ex)

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[float, str, str, str, list[tuple[str, str]], dict[str, str], bytes] | None:
        """(arrival, method, target, version, headers, lower-case headers, body); None (answered) when bad."""
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if e.partial.strip():
                await self._error(writer, 400, "incomplete request head")
            return None
        except asyncio.LimitOverrunError:
            await self._error(writer, 431, "request head too large")
            return None
        t_arrival = time.monotonic() - self.rec.t0
        try:
            start, headers, low = parse_head(raw[:-4].lstrip(b"\r\n"))
            method, target, version = start.split(" ")
            if not version.startswith("HTTP/1."):
                raise ProtocolError(f"unsupported version {version!r}")
            if low.get("expect", "").lower() == "100-continue" and (
                low.get("content-length", "0") != "0" or "transfer-encoding" in low
            ):
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = await read_request_body(reader, low)
        except (ProtocolError, ValueError, asyncio.LimitOverrunError) as e:
            await self._error(writer, 400, f"malformed request: {e}")
            return None
        return t_arrival, method, target, version, headers, low, body

    def _forwarded(
        self, method: str, target: str, headers: list[tuple[str, str]], ctoks: list[str], body: bytes
    ) -> bytes:
        """The request as forwarded: hop-by-hop headers dropped, Host and Content-Length set."""
        drop = REQ_DROP | set(ctoks)
        out = [f"{method} {self.up.base}{target} HTTP/1.1", f"Host: {self.up.host_header}"]
        out += [f"{k}: {v}" for k, v in headers if k.lower() not in drop]
        if body or method in ("POST", "PUT", "PATCH"):
            out.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body

    async def _upstream_failed(
        self, writer: asyncio.StreamWriter, conn: _UpConn, ex: Exchange | None, e: UpstreamFailed, keep: bool
    ) -> bool:
        """A 502 when the client has no reply byte yet (the connection kept if it can be), else a cut reply."""
        conn.close()
        if ex is not None:
            ex.error = str(e)
            if not ex.status:
                ex.status = 502
        if not e.sent:
            await self._error(writer, 502, f"upstream: {e}", keep)
            return keep
        return False  # mid-body: the client sees a cut reply

    async def _exchange(self, reader, writer, conn, method, req_bytes, ex, keep, http10) -> bool:
        raw = await self._send_request(conn, req_bytes, ex)
        status, version, rest, headers, low = _reply_head_fields(raw)
        if ex is not None:
            ex.status = status
            ex.tee = ResponseTee(low.get("content-type", ""), low.get("content-encoding", ""), self.max_event)
        plan = _relay_plan(method, status, version, low, keep, http10)
        await _send(writer, _client_head(rest, headers, plan, http10))

        tee = ex.tee if ex is not None else None
        r = conn.r
        assert r is not None  # _send_request leaves the connection open
        try:
            trusted = await _relay_body(r, writer, tee, plan)
        except _MalformedChunks as e:
            # the body's end cannot be found: relay the rest as it comes until the upstream closes,
            # then close the client connection too (it gets exactly the upstream's bytes)
            if ex is not None:
                ex.error = f"malformed chunked reply: {e}"
            await _relay_rest(r, writer, e.piece)
            conn.close()
            return False
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            if isinstance(e, ClientGone):
                raise
            raise UpstreamFailed(f"upstream connection lost mid-reply: {type(e).__name__}", True) from None
        if not (plan.up_keep and trusted):
            conn.close()
        return plan.client_keep

    async def _send_request(self, conn: _UpConn, req_bytes: bytes, ex: Exchange | None) -> bytes:
        """Sends the request upstream and returns the reply's head (after any 1xx interim replies);
        a kept-alive connection the server had closed is replaced once."""
        for attempt in (0, 1):
            reused = conn.alive()
            if not reused:
                conn.close()
                conn.r, conn.w = await self._connect()
            r, w = conn.r, conn.w
            assert r is not None and w is not None  # alive, or just connected
            try:
                w.write(req_bytes)
                await w.drain()
                if ex is not None and not ex.analysed:
                    # the prompt is hashed while the upstream works on the request
                    if self.use_thread:
                        await asyncio.get_running_loop().run_in_executor(None, ex.analyse)
                    else:
                        ex.analyse()
                raw = await r.readuntil(b"\r\n\r\n")
                while raw[9:10] == b"1" and raw[9:12] != b"101":  # 1xx interim responses
                    raw = await r.readuntil(b"\r\n\r\n")
                return raw
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                conn.close()
                if reused and attempt == 0:  # a kept-alive connection the server had closed: once more
                    continue
                raise UpstreamFailed(f"connection lost before the reply: {type(e).__name__}", False) from None
            except asyncio.LimitOverrunError:
                raise UpstreamFailed("reply head too large", False) from None
        raise AssertionError("unreachable: the second attempt is on a new connection, which returns or raises")

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new upstream connection, or UpstreamFailed (before any byte went to the client)."""
        up = self.up
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(up.host, up.port, ssl=up.ssl, limit=MAX_HEAD), self.connect_timeout
            )
        except TimeoutError:
            raise UpstreamFailed(f"connect to {up.host}:{up.port} timed out", False) from None
        except OSError as e:
            raise UpstreamFailed(f"cannot connect to {up.host}:{up.port}: {e.strerror or e}", False) from None

    async def _error(self, writer, status: int, msg: str, keep: bool = False) -> None:
        body = orjson.dumps({"error": {"message": msg, "type": "proxy_error", "code": status}})
        reason = {400: "Bad Request", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}.get(status, "Error")
        close = "" if keep else "Connection: close\r\n"
        head = (
            f"HTTP/1.1 {status} {reason}\r\nServer: {PROG}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{close}\r\n"
        )
        try:
            await _send(writer, head.encode() + body)
        except ClientGone:
            pass


class ClientWriteError(ClientGone, ConnectionError):
    pass


def _record(ex: Exchange) -> None:
    """Write the exchange's trace line (hashing its prompt first if that has not happened yet)."""
    try:
        if not ex.analysed:
            ex.analyse()
        ex.finish()
    except Exception as e:  # noqa: BLE001 (a trace write error must not kill the proxy)
        print(f"{PROG}: cannot record a request: {e!r}", file=sys.stderr, flush=True)


def _reply_head_fields(raw: bytes) -> tuple[int, str, str, list[tuple[str, str]], dict[str, str]]:
    """(status, version, status line after the version, headers, lower-case headers) of a reply head."""
    try:
        start, headers, low = parse_head(raw[:-4])
        version, _, rest = start.partition(" ")
        status = int(rest[:3])
    except (ProtocolError, ValueError) as e:
        raise UpstreamFailed(f"malformed reply head: {e}", False) from None
    return status, version, rest, headers, low


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one reply is relayed: its body's framing upstream, and what the client gets."""

    mode: str  # the upstream body: "none", "chunked", "length" or "close" (delimited by the close)
    length: int  # the body's length in "length" mode
    up_keep: bool  # the upstream connection may be reused afterwards
    client_keep: bool  # the client connection stays open afterwards
    dechunk: bool  # a chunked body decoded for an HTTP/1.0 client
    rechunk: bool  # a close-delimited body re-framed as chunks for an HTTP/1.1 client
    ctoks: tuple[str, ...]  # the reply's Connection tokens (headers it names are not relayed)


def _relay_plan(method: str, status: int, version: str, low: dict[str, str], keep: bool, http10: bool) -> _Plan:
    """How the reply's body is framed (RFC 9112 6.3) and relayed, and which connections stay open."""
    ctoks = tokens(low.get("connection"))
    up_keep = "close" not in ctoks and (version == "HTTP/1.1" or "keep-alive" in ctoks)
    te = tokens(low.get("transfer-encoding"))
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        mode, length = "none", 0
    elif te and te[-1] == "chunked":
        mode, length = "chunked", 0
    elif "content-length" in low:
        try:
            length = int(low["content-length"].split(",")[0])
        except ValueError:
            raise UpstreamFailed("bad Content-Length in the reply", False) from None
        mode = "length"
    else:
        mode, length, up_keep = "close", 0, False
    if status == 101:  # protocol switches are not relayed: end both connections after the head
        up_keep, keep = False, False
    # chunked to an HTTP/1.0 client is decoded; a close-delimited body to HTTP/1.1 becomes chunked
    dechunk = mode == "chunked" and http10
    rechunk = mode == "close" and not http10
    client_keep = keep and not dechunk and not (mode == "close" and http10)
    return _Plan(mode, length, up_keep, client_keep, dechunk, rechunk, tuple(ctoks))


def _client_head(rest: str, headers: list[tuple[str, str]], plan: _Plan, http10: bool) -> bytes:
    """The reply head as the client gets it: hop-by-hop headers dropped, framing and Connection set."""
    drop = RESP_DROP | set(plan.ctoks)
    if plan.dechunk:
        drop = drop | {"transfer-encoding", "trailer"}
    lines = [("HTTP/1.1 " + rest) if not http10 else ("HTTP/1.0 " + rest)]
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in drop]
    if plan.rechunk:
        lines.append("Transfer-Encoding: chunked")
    if not plan.client_keep:
        lines.append("Connection: close")
    elif http10:
        lines.append("Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _MalformedChunks(Exception):
    """A chunked reply whose end cannot be found; `piece` is the read that showed it (not yet relayed)."""

    def __init__(self, err: ProtocolError, piece: bytes) -> None:
        super().__init__(str(err))
        self.piece = piece


async def _relay_body(
    r: asyncio.StreamReader, writer: asyncio.StreamWriter, tee: ResponseTee | None, plan: _Plan
) -> bool:
    """Relays the reply's body as it arrives, a copy to the tee; False when the upstream connection
    cannot be trusted with another request (bytes came after the end of a chunked body)."""
    if plan.mode == "chunked":
        return await _relay_chunked(r, writer, tee, plan.dechunk)
    if plan.mode == "length":
        await _relay_length(r, writer, tee, plan.length)
    elif plan.mode == "close":
        await _relay_to_close(r, writer, tee, plan.rechunk)
    return True


async def _relay_chunked(
    r: asyncio.StreamReader, writer: asyncio.StreamWriter, tee: ResponseTee | None, dechunk: bool
) -> bool:
    """A chunked body, relayed with its framing (decoded for an HTTP/1.0 client); False when bytes follow it."""
    trusted = True
    dec = ChunkedDecoder()
    while not dec.done:
        piece = await r.read(READ_SIZE)
        if not piece:
            raise UpstreamFailed("upstream closed in the middle of the reply", True)
        try:
            used, data = dec.feed(piece)
        except ProtocolError as e:
            raise _MalformedChunks(e, piece) from None
        if used < len(piece):
            trusted = False  # bytes after the end of the body: do not trust this connection
            piece = piece[:used]
        if dechunk:
            piece = b"".join(data)
        if tee is not None:
            for d in data:
                tee.feed(d)
        await _send(writer, piece)
    return trusted


async def _relay_length(
    r: asyncio.StreamReader, writer: asyncio.StreamWriter, tee: ResponseTee | None, length: int
) -> None:
    """A Content-Length body, relayed as it arrives."""
    left = length
    while left > 0:
        piece = await r.read(min(left, READ_SIZE))
        if not piece:
            raise UpstreamFailed("upstream closed in the middle of the reply", True)
        left -= len(piece)
        if tee is not None:
            tee.feed(piece)
        await _send(writer, piece)


async def _relay_to_close(
    r: asyncio.StreamReader, writer: asyncio.StreamWriter, tee: ResponseTee | None, rechunk: bool
) -> None:
    """A body delimited by the upstream's close, relayed as it arrives (as chunks for HTTP/1.1)."""
    while True:
        piece = await r.read(READ_SIZE)
        if not piece:
            break
        if tee is not None:
            tee.feed(piece)
        await _send(writer, b"%x\r\n%b\r\n" % (len(piece), piece) if rechunk else piece)
    if rechunk:
        await _send(writer, b"0\r\n\r\n")


async def _relay_rest(r: asyncio.StreamReader, writer: asyncio.StreamWriter, piece: bytes) -> None:
    """Relays `piece` and whatever follows until the upstream closes (a reply whose end is unknown)."""
    try:
        await _send(writer, piece)
        while piece := await r.read(READ_SIZE):
            await _send(writer, piece)
    except (ConnectionError, asyncio.IncompleteReadError) as e2:
        if isinstance(e2, ClientGone):
            raise


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    if writer.transport.is_closing():
        raise ClientWriteError("client connection closed")
    writer.write(data)
    try:
        await writer.drain()
    except ConnectionError:
        raise ClientWriteError("client connection lost") from None


class _UpConn:
    __slots__ = ("r", "w")

    def __init__(self) -> None:
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    def alive(self) -> bool:
        r, w = self.r, self.w
        # unread bytes on an idle connection: not reusable (StreamReader keeps them in its private _buffer)
        return (
            w is not None
            and r is not None
            and not w.transport.is_closing()
            and not r.at_eof()
            and not vars(r)["_buffer"]
        )

    def close(self) -> None:
        if self.w is not None and not self.w.transport.is_closing():
            self.w.transport.abort()  # abort, not close: a cut stream must stop the generation now
        self.r = self.w = None


# -- entry point ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Streaming-transparent HTTP proxy in front of an OpenAI-compatible server that writes a "
            "llm-locust JSONL trace: one line per POST /v1/completions or /v1/chat/completions (arrival "
            "time, token counts from the reply's usage, prefix-block hashes, pseudonymous conversation "
            "ids). No prompt text unless --store-text. Prints 'llm-locust trace record listening on "
            "http://HOST:PORT' as its first stdout line."
        ),
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="address to listen on (default %(default)s; port 0 picks a free port)",
    )
    p.add_argument("--upstream", required=True, metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--out", required=True, metavar="FILE", help="trace file to write (JSONL)")
    p.add_argument("--force", action="store_true", help="overwrite --out when it exists and is not empty")
    p.add_argument(
        "--store-text",
        action="store_true",
        help="also store each request's prompt / messages (default: lengths and hashes only)",
    )
    p.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        metavar="TOKENS",
        help="prefix block size in tokens (default %(default)s; without --tokenizer a block is "
        f"TOKENS*{CHARS_PER_TOKEN} characters)",
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json (or a directory with one) for token blocks and prompt counts; "
        "needs the 'tokenizers' package",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="upstream connect timeout (default %(default)s)",
    )
    p.add_argument(
        "--max-event-bytes",
        type=int,
        default=MAX_EVENT,
        metavar="BYTES",
        help="the copy of a reply is parsed one SSE event (or one JSON body) up to this size; a "
        "larger one is still relayed, and its trace line says it was not parsed "
        "(default %(default)s = 16 MiB)",
    )
    return p


def _listen_addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bad --listen {text!r} (expected HOST:PORT)")
    return host.strip("[]") or "127.0.0.1", int(port)


async def serve(opts: argparse.Namespace, hasher: PrefixHasher) -> None:
    upstream = Upstream.parse(opts.upstream)
    host, port = _listen_addr(opts.listen)
    rec = Recorder(opts.out, hasher, opts.store_text, opts.force)
    proxy = Proxy(upstream, rec, opts.connect_timeout, opts.max_event_bytes)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before the first line: a signal right after it ends us cleanly
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(proxy.client, host, port, limit=MAX_HEAD, backlog=1024, reuse_address=True)
    h, p = server.sockets[0].getsockname()[:2]
    shown = f"[{h}]" if ":" in h else ("127.0.0.1" if h == "0.0.0.0" else h)
    print(f"{PROG} listening on http://{shown}:{p}", flush=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - (time.monotonic() - rec.t0)))
    print(
        f"{PROG}: forwarding to {upstream.scheme}://{upstream.host_header}{upstream.base}, writing {opts.out}"
        f"{' (with prompt text)' if opts.store_text else ''}; timestamp 0 = {started}",
        file=sys.stderr,
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        server.close()
        tasks = list(proxy.tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        rec.close()
        print(f"{PROG}: wrote {rec.lines} trace lines to {opts.out}", file=sys.stderr, flush=True)


def _parse_args(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    opts = p.parse_args(argv)
    if opts.block_size < 1:
        p.error("--block-size must be >= 1")
    if not 0 < opts.connect_timeout <= 3600:  # nan fails this too
        p.error(f"--connect-timeout must be a number of seconds in (0, 3600], got {opts.connect_timeout}")
    if opts.max_event_bytes < 1024:
        p.error("--max-event-bytes must be >= 1024")
    try:
        _listen_addr(opts.listen)
        Upstream.parse(opts.upstream)
    except ValueError as e:
        p.error(str(e))
    return opts


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0, 1 (a run-time error), 2 (bad arguments); --help prints the help and returns 0."""
    p = build_parser()
    try:
        opts = _parse_args(p, argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        tok = load_tokenizer(opts.tokenizer) if opts.tokenizer else None
        asyncio.run(serve(opts, PrefixHasher(opts.block_size, tok)))
    except FileExistsError as e:  # --out refused: nothing was listened on or written
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except (TokenizerError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a Ctrl-C before the loop's own handler was in place
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

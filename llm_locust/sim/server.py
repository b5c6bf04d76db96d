"""OpenAI-compatible streaming server over the batching model, on a raw asyncio.Protocol.

HTTP/1.1 with keep-alive (and pipelining), chunked transfer encoding for streams. Responses
imitate vLLM's bytes. All chunks a stream gets in one engine iteration leave in one write.
Besides /v1/completions and /v1/chat/completions it serves the OpenAI Responses API
(/v1/responses), Anthropic Messages (/v1/messages) and SGLang's native /generate, with the same
engine, pacing, faults and ground truth (PROTOCOLS). /v1/embeddings, /v1/rerank (and /rerank) and
vLLM's /v1/score answer one JSON document each, outside the engine (JSON_ROUTES).
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
import signal
import time
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import orjson

from llm_locust.sim.answers import GradedAnswers
from llm_locust.sim.connection import Conn, error_json
from llm_locust.sim.engine import Engine, Seq, SimConfig
from llm_locust.sim.formats import FINGERPRINT, make_format, mids
from llm_locust.sim.json_routes import JSON_ROUTES, json_reply
from llm_locust.sim.metrics_page import TTFT_BUCKETS, exposition
from llm_locust.sim.parse import BadRequest, count_input, count_prompt, int_field, prompt_words

VOCAB = (
    " the of and to in is was for on that with as by at from it an be this are or which but not"
    " have had one all were they their new more has been would first other its time also after"
    " two into only over most some when can could these may made such years world city state"
    " between during under part like through"
).split(" ")[1:]
VOCAB = [" " + w for w in VOCAB][:64]
VMASK = len(VOCAB) - 1  # 64 words: index with & VMASK
FAST_BATCH = 64  # fast mode: tokens written at once before yielding to the loop
MIDS = {chat: mids(VOCAB, chat) for chat in (False, True)}  # OpenAI's common chunk per word
# generation routes -> wire format (sim/formats.py make_format)
ROUTES = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "anthropic",
    "/generate": "sglang",
}
PROTOCOLS = ("responses", "anthropic", "sglang")  # rendered per event by their class (sim/formats.py)


@dataclass
class Fault:
    kind: str  # http500 | http429 | stream_error | truncate | stall | slow_headers
    k: int = 0
    seconds: float = 0.0
    spec: str = ""


def parse_fault(spec: str) -> Fault:
    s = spec.strip()
    if s in ("http500", "http429"):
        return Fault(s, spec=s)
    kind, sep, arg = s.partition("@") if "@" in s else s.partition(":")
    if not sep:
        raise ValueError(f"bad fault spec {spec!r}")
    if kind == "slow_headers":
        return Fault(kind, seconds=float(arg), spec=s)
    if kind == "stall":
        k, _, sec = arg.partition(":")
        return Fault(kind, int(k), float(sec), s)
    if kind in ("stream_error", "truncate"):
        return Fault(kind, int(arg), spec=s)
    raise ValueError(f"bad fault spec {spec!r}")


@dataclass
class Options:
    sim: SimConfig = field(default_factory=SimConfig)
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "llm-locust-sim"
    fast: bool = False
    eos_mean: float | None = None
    default_max_tokens: int = 16
    token_log: str | None = None
    faults: list = field(default_factory=list)  # [(Fault, rate)]
    seed: int = 0
    graded_set: str | None = None  # a graded set's JSONL: its questions are answered (sim.answers)
    graded_accuracy: float = 1.0


class Stream:
    """One generation request: renders its chunks and tracks its timeline."""

    def __init__(self, app, conn, rid, chat, stream, n_in, max_tokens, target, fault, usage, cont, t_recv, proto=None):
        self.app, self.conn, self.rid, self.chat, self.stream = app, conn, rid, chat, stream
        self.proto = proto  # None: OpenAI completions/chat; else one of PROTOCOLS
        self.n_in, self.max_tokens, self.target, self.fault = n_in, max_tokens, target, fault
        self.usage, self.cont, self.t_recv = usage, cont, t_recv
        self.n_out = 0
        self.items = None  # the prompt's tokens, when the prefix cache is on
        self.tool_name: str | None = None  # chat with tool_choice "required": the reply is one call of this tool
        self.fast_cached = 0  # fast mode: prompt tokens found in the prefix cache
        self.t_tokens: list[float] = []
        self.ended = False
        self.wait_write = False
        self.seq: Seq | None = None
        self.counted = False  # fast mode: counted in app.active
        self.w0 = app.n_requests & VMASK
        self.reason = "length" if target == max_tokens else "stop"
        self.answer: list[str] | None = None  # a graded question's reply, token by token
        # the wire format (sim/formats.py): OpenAI completions or chat when proto is None
        self.wire = make_format(proto or ("chat" if chat else "completions"), self, MIDS)

    # -- lifecycle --
    def start(self):
        """Headers out (stream), then into the engine (or straight to pumping in fast mode)."""
        if self.conn.closed:
            return self.abort("cancelled")
        if self.stream:
            head = self.conn.head(200, b"text/event-stream; charset=utf-8", None, self.app.rid_header(self))
            self.conn.write(head + self.wire.preamble())
        f = self.fault
        if f and f.k == 0 and f.kind in ("stream_error", "truncate"):
            parts: list[bytes] = []
            return self._flush(parts, self._cut(parts))
        if f and f.k == 0 and f.kind == "stall":
            self.app.loop.call_later(f.seconds, self._submit)
        else:
            self._submit()

    def _submit(self):
        if self.ended:
            return
        if self.app.opts.fast:
            self.app.active += 1
            self.counted = True
            if self.items is not None:
                self.fast_cached = self.app.engine.cache.admit(self.items, self.n_in)
            self.pump()
        else:
            self.seq = Seq(self.n_in, self.target, self.n_in + self.max_tokens, owner=self)
            if self.items is not None:
                self.seq.prompt, self.seq.output = self.items, self.output_words(self.target)
            self.app.engine.submit(self.seq)
            self.app.kick()

    def pump(self):
        """Fast mode: emit up to FAST_BATCH tokens in one write, then yield to the loop."""
        if self.ended:
            return
        parts: list[bytes] = []
        for _ in range(FAST_BATCH):
            self.n_out += 1
            after = self._token(parts)
            if after:
                break
        self._flush(parts, after)
        if self.ended or after == "stall":
            return
        if self.conn.paused:
            self.wait_write = True
        else:
            self.app.loop.call_soon(self.pump)

    @property
    def n_cached(self) -> int:
        """Prompt tokens served from the prefix cache (0 without one)."""
        return self.seq.n_cached if self.seq is not None else self.fast_cached

    def output_words(self, n: int) -> list:
        """The first n output tokens as the prefix cache sees them (the words a client re-sends)."""
        return [VOCAB[(self.w0 + i) & VMASK][1:] for i in range(1, n + 1)]

    def on_engine_token(self):
        seq = self.seq
        assert seq is not None  # the engine calls this only for the Seq that _submit gave it
        k = seq.got  # 1, or 1 + accepted drafts: one chunk carries them all
        f = self.fault
        if k > 1 and f is not None and f.kind in ("stream_error", "truncate") and self.n_out < f.k < self.n_out + k:
            k = f.k - self.n_out  # the cut comes after exactly K tokens
        self.n_out += k
        parts: list[bytes] = []
        self._flush(parts, self._token(parts, k))

    def _token(self, parts: list, k: int = 1) -> str | None:
        """Render the chunk of tokens n_out-k+1 .. n_out into parts; returns what must happen after
        the write, if anything."""
        n = self.n_out
        app = self.app
        t = perf_counter()
        if k == 1:
            self.t_tokens.append(t)
        else:
            self.t_tokens.extend([t] * k)
        app.gen_tokens += k
        if n == k:
            app.first_token(self)
        f = self.fault
        cut = f is not None and f.k == n and f.kind in ("stream_error", "truncate")
        last = n >= self.target and not cut
        if self.stream:
            if self.answer is not None:
                text = "".join(self.answer[n - k : n])
            elif k == 1:
                text = VOCAB[(self.w0 + n) & VMASK]
            else:
                text = "".join(VOCAB[(self.w0 + i) & VMASK] for i in range(n - k + 1, n + 1))
            parts.append(self.wire.event(text, last, k))
        if cut:
            return self._cut(parts)
        if last:
            self._finish(parts)
            return "end"
        if f is not None and f.kind == "stall" and n - k < f.k <= n:
            if self.seq is not None:
                self.seq.paused = True
            app.loop.call_later(f.seconds, self._resume)
            return "stall"
        return None

    def _finish(self, parts):
        n = self.n_out
        app = self.app
        app.success[self.reason] = app.success.get(self.reason, 0) + 1
        if self.items is not None and self.seq is None:  # fast mode: the finished sequence's blocks enter the cache
            app.engine.cache.insert(list(self.items) + self.output_words(n))
        parts.append(self.wire.closing() if self.stream else self._whole())
        self._log("ok", 200)

    def _cut(self, parts) -> str:
        if self.fault.kind == "truncate":
            self._log("truncated", 200)
            return "close"
        msg = f"simulated stream error after {self.n_out} tokens"
        if self.stream:
            parts.append(self.wire.error_event(msg))
            self._log("stream_error", 200)
        else:
            body = error_json(msg, "InternalServerError", 500)
            parts.append(self.conn.head(500, b"application/json", len(body)) + body)
            self._log("http_error", 500)
        return "end"

    def _whole(self) -> bytes:
        """A non-streaming reply in the stream's format (sim/formats.py): head and body."""
        text = "".join(VOCAB[(self.w0 + i) & VMASK] for i in range(1, self.n_out + 1))
        body = self.wire.whole(text)
        return self.conn.head(200, b"application/json", len(body), self.app.rid_header(self)) + body

    def _flush(self, parts, after=None):
        if parts:
            self.conn.write(b"".join(parts))
        if after in ("end", "close"):
            self._release()
            if after == "close":
                self.conn.close()
            else:
                self.conn.done()

    def _resume(self):
        if self.ended:
            return
        if self.seq is not None:
            self.seq.paused = False
            self.app.kick()
        else:
            self.pump()

    def abort(self, outcome: str):
        if self.ended:
            return
        self._release()
        self._log(outcome, 200)

    def _release(self):
        self.ended = True
        if self.seq is not None:
            self.app.engine.cancel(self.seq)  # a no-op when it finished normally
            self.app.kick()  # a freed slot may let a waiting request in while the engine idles
        if self.counted:
            self.counted = False
            self.app.active -= 1

    def _log(self, outcome: str, status: int):
        self.ended = True
        self.app.log(self, outcome, status)


class App:
    def __init__(self, opts: Options, loop):
        self.opts, self.loop = opts, loop
        self.model_b = opts.model.encode()
        self.engine = Engine(opts.sim, seed=opts.seed + 2)
        self.timer = None
        self.end_at = 0.0
        self.rng_eos = random.Random(opts.seed)
        self.rng_fault = random.Random(opts.seed + 1)
        self.n_requests = 0
        self.active = 0  # fast mode's running streams
        self.gen_tokens = self.prompt_tokens = 0
        self.success: dict[str, int] = {}
        self.ttft = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0
        self.logf = open(opts.token_log, "ab", buffering=0) if opts.token_log else None
        self.graded = None
        if opts.graded_set:
            self.graded = GradedAnswers(opts.graded_set, opts.graded_accuracy, opts.seed)

    # -- the engine loop: iteration ends are planned from the previous planned end, never from now --
    def kick(self):
        if self.timer is None:
            self._begin(perf_counter())

    def _begin(self, start: float):
        dur = self.engine.begin()
        if dur is None:
            self.timer = None  # idle until a request arrives or a stall ends
            return
        self.end_at = start + dur
        self.timer = self.loop.call_at(self.loop.time() + (self.end_at - perf_counter()), self._on_end)

    def _on_end(self):
        for seq in self.engine.end():
            seq.owner.on_engine_token()
        self._begin(self.end_at)

    # -- requests --
    def handle(self, conn: Conn, method: str, path: str, headers: dict, body: bytes, t_recv: float):
        kind = JSON_ROUTES.get(path)
        if kind is not None:
            if method != "POST":
                return conn.respond(405, b'{"detail":"Method Not Allowed"}')
            return self._json_request(conn, kind, headers, body)
        if path == "/reset_prefix_cache":
            return self._reset_prefix_cache(conn, method)
        proto = ROUTES.get(path)
        gen = proto is not None
        allowed = "POST" if gen else "GET"
        known = gen or path in ("/v1/models", "/health", "/metrics")
        if not known:
            return conn.respond(404, b'{"detail":"Not Found"}')
        if method != allowed:
            return conn.respond(405, b'{"detail":"Method Not Allowed"}')
        if path == "/health":
            return conn.respond(200, b"")
        if path == "/metrics":
            return conn.respond(200, self.metrics().encode(), b"text/plain; version=0.0.4; charset=utf-8")
        if path == "/v1/models":
            return conn.respond(
                200,
                orjson.dumps(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": self.opts.model,
                                "object": "model",
                                "created": int(time.time()),
                                "owned_by": FINGERPRINT,
                                "root": self.opts.model,
                                "parent": None,
                                "max_model_len": self.opts.sim.kv_tokens,
                            }
                        ],
                    }
                ),
            )
        try:
            st = self._new_stream(conn, proto == "chat", headers, body, t_recv, proto)
        except BadRequest as e:
            return conn.respond(400, error_json(str(e), "BadRequestError", 400))
        conn.stream = st
        f = st.fault
        if f and f.kind in ("http500", "http429"):
            code = 500 if f.kind == "http500" else 429
            st._log("http_error", code)
            conn.stream = None
            typ = "InternalServerError" if code == 500 else "TooManyRequests"
            return conn.respond(
                code, error_json(f"simulated {f.kind}", typ, code), extra=b"retry-after: 1\r\n" if code == 429 else b""
            )
        if f and f.kind == "slow_headers":
            self.loop.call_later(f.seconds, st.start)
        else:
            st.start()

    def _reset_prefix_cache(self, conn: Conn, method: str):
        """vLLM's dev-mode POST /reset_prefix_cache: {"success": false} while requests are in the
        engine (their blocks are held, as vLLM refuses), else the cache emptied; its counters stay."""
        if method != "POST":
            return conn.respond(405, b'{"detail":"Method Not Allowed"}')
        e = self.engine
        busy = self.active > 0 if self.opts.fast else bool(e.running or e.waiting)
        if not busy and e.cache is not None:
            e.cache.lru.clear()
        return conn.respond(200, b'{"success":%s}' % (b"false" if busy else b"true"))

    def _json_request(self, conn: Conn, kind: str, headers: dict, body: bytes):
        """Embeddings, rerank, score: one JSON reply after a latency proportional to the input."""
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            return conn.respond(400, error_json(f"malformed JSON body: {e}", "BadRequestError", 400))
        try:
            if not isinstance(req, dict):
                raise BadRequest("body must be a JSON object")
            fault = parse_fault(headers["x-sim-fault"]) if "x-sim-fault" in headers else self._draw_fault()
            n_in, reply = json_reply(kind, req, self.opts.model)
        except (BadRequest, ValueError) as e:
            return conn.respond(400, error_json(str(e), "BadRequestError", 400))
        self.n_requests += 1
        if fault is not None and fault.kind in ("http500", "http429"):
            code = 500 if fault.kind == "http500" else 429
            return conn.respond(code, error_json(f"simulated {fault.kind}", "InternalServerError", code))
        self.prompt_tokens += n_in
        cfg = self.opts.sim
        delay = 0.0 if self.opts.fast else cfg.iter_base + cfg.iter_per_prefill_token * n_in
        rid = headers.get("x-request-id") or f"sim-{self.n_requests}"
        extra = b"x-request-id: %s\r\n" % rid.encode("latin-1", "replace")

        def answer():
            if not conn.closed:
                conn.respond(200, reply, extra=extra)

        self.loop.call_later(delay, answer)

    def _new_stream(self, conn, chat, headers, body, t_recv, proto=None) -> Stream:
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"malformed JSON body: {e}") from None
        if not isinstance(req, dict):
            raise BadRequest("body must be a JSON object")
        proto = proto if proto in PROTOCOLS else None
        n_in, max_tokens, min_tokens, ignore_eos = self._request_lengths(req, chat, proto)
        if min_tokens > max_tokens:
            raise BadRequest("'min_tokens' must be <= 'max_tokens'")
        if not self.opts.fast and n_in + max_tokens > self.opts.sim.kv_tokens:
            # vLLM's wording (OpenAIServing._validate_input), which protocols.causes reads as overlong
            raise BadRequest(
                f"This model's maximum context length is {self.opts.sim.kv_tokens} tokens. However, you "
                f"requested {n_in + max_tokens} tokens ({n_in} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        so = req.get("stream_options") or {}
        if not isinstance(so, dict):
            raise BadRequest("'stream_options' must be an object")
        fault: Fault | None
        if "x-sim-fault" in headers:
            try:
                fault = parse_fault(headers["x-sim-fault"])
            except ValueError as e:
                raise BadRequest(str(e)) from None
        else:
            fault = self._draw_fault()
        self.n_requests += 1
        rid = headers.get("x-request-id") or f"sim-{self.n_requests}"
        target = self._draw_length(max_tokens, min_tokens, bool(ignore_eos))
        full = self.graded.answer(req) if self.graded is not None else None
        answer = None
        if full is not None:  # a graded question: the reply is its answer, then stop
            answer = full[:max_tokens]
            target = len(answer)
        st = Stream(
            self,
            conn,
            rid,
            chat,
            bool(req.get("stream")),
            n_in,
            max_tokens,
            target,
            fault,
            bool(so.get("include_usage")),
            bool(so.get("continuous_usage_stats")),
            t_recv,
            proto,
        )
        if full is not None:
            st.answer = answer
            st.reason = "length" if len(full) > max_tokens else "stop"
        if self.engine.cache is not None:
            st.items = prompt_words(req, proto, chat)
        tools = req.get("tools")
        if (
            chat
            and proto is None
            and st.stream
            and isinstance(tools, list)
            and tools
            and req.get("tool_choice") == "required"
        ):
            fn = tools[0].get("function") if isinstance(tools[0], dict) else None
            st.tool_name = str((fn or {}).get("name") or "tool") if isinstance(fn, dict) else "tool"
            st.reason = "tool_calls"
        return st

    def _request_lengths(self, req: dict, chat: bool, proto: str | None) -> tuple[int, int, int, Any]:
        """(n_in, max_tokens, min_tokens, ignore_eos): each protocol names and nests these differently."""
        if proto is None:
            n_in = count_prompt(req, chat)
            mt_name = "max_completion_tokens" if chat and req.get("max_tokens") is None else "max_tokens"
            max_tokens = int_field(req, mt_name, self.opts.default_max_tokens, 1)
            min_tokens = int_field(req, "min_tokens", 0, 0)
            return n_in, max_tokens, min_tokens, req.get("ignore_eos")
        n_in = count_input(req, proto)
        params: dict = req
        if proto == "sglang":
            sampling = req.get("sampling_params")
            sampling = {} if sampling is None else sampling
            if not isinstance(sampling, dict):
                raise BadRequest("'sampling_params' must be an object")
            params = sampling
        mt_name = {"responses": "max_output_tokens", "anthropic": "max_tokens", "sglang": "max_new_tokens"}[proto]
        if proto == "anthropic" and req.get("max_tokens") is None:
            raise BadRequest("max_tokens: Field required")
        max_tokens = int_field(params, mt_name, self.opts.default_max_tokens, 1)
        min_tokens = int_field(params, "min_new_tokens" if proto == "sglang" else "min_tokens", 0, 0)
        return n_in, max_tokens, min_tokens, params.get("ignore_eos")

    def _draw_length(self, max_tokens, min_tokens, ignore_eos) -> int:
        m = self.opts.eos_mean
        if ignore_eos or not m:
            return max_tokens
        # geometric: every token is EOS with probability 1/m, so the mean length is m (before clamping)
        u = self.rng_eos.random()
        n = 1 if m <= 1 else 1 + int(math.log(1.0 - u) / math.log(1.0 - 1.0 / m))
        return min(max_tokens, max(n, min_tokens, 1))

    def _draw_fault(self) -> Fault | None:
        if not self.opts.faults:
            return None
        u = self.rng_fault.random()
        for fault, rate in self.opts.faults:
            if u < rate:
                return fault
            u -= rate
        return None

    def rid_header(self, st: Stream) -> bytes:
        return b"x-request-id: %s\r\n" % st.rid.encode("latin-1", "replace")

    def first_token(self, st: Stream):
        ttft = st.t_tokens[0] - st.t_recv
        self.ttft[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
        self.ttft_sum += ttft
        self.prompt_tokens += st.n_in

    def log(self, st: Stream, outcome: str, status: int):
        if self.logf is not None:
            self.logf.write(
                orjson.dumps(
                    {
                        "id": st.rid,
                        "t_recv": st.t_recv,
                        "t_tokens": st.t_tokens,
                        "n_in": st.n_in,
                        "n_out": st.n_out,
                        "outcome": outcome,
                        "status": status,
                        "fault": st.fault.spec if st.fault else None,
                        "finish_reason": st.reason if outcome == "ok" else None,
                    }
                )
                + b"\n"
            )

    def metrics(self) -> str:
        return exposition(self)

    def close(self):
        if self.logf is not None:
            self.logf.close()


async def serve(opts: Options, ready=None) -> None:
    """Serve until SIGTERM/SIGINT. Prints the URL as the first stdout line."""
    loop = asyncio.get_running_loop()
    app = App(opts, loop)
    server = await loop.create_server(lambda: Conn(app), opts.host, opts.port, backlog=4096, reuse_address=True)
    host, port = server.sockets[0].getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before the first line: a signal right after it ends us cleanly
        loop.add_signal_handler(sig, stop.set)
    print(f"llm-locust sim listening on http://{host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        app.close()

"""The simulator's wire formats, one class each: OpenAI completions and chat (vLLM's bytes, the
common chunk pre-rendered per word: the simulator's fast path), the OpenAI Responses API,
Anthropic Messages and SGLang's native /generate. A stream (server.Stream) asks its format for what
goes before the first token, each chunk's event, the closing events, a non-streaming reply's body
and an error inside the stream; the engine, pacing, faults and ground truth are the stream's, the
same for every format. The vocabulary (VOCAB) is the stream's: a format renders the text it is
given."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson

from llm_locust.sim.connection import DONE, END, frame


def sse_event(name: str, obj: dict) -> bytes:
    """One typed SSE event (`event:` line, then its JSON), chunk-framed."""
    return frame(b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps(obj)))


class EventFormat:
    """One stream's events in a wire format; `st` is the stream (n_in, n_out, n_cached, reason...)."""

    def __init__(self, st: Any) -> None:
        self.st = st
        self.oid = f"{st.app.n_requests:016x}"
        self.text = ""  # the output so far

    def preamble(self) -> bytes:
        """What a stream sends with its headers, before any token."""
        return b""

    def event(self, word: str, last: bool, k: int = 1) -> bytes:
        """The event of the stream's last `k` tokens (their text: `word`); `last`: the final one."""
        raise NotImplementedError

    def closing(self) -> bytes:
        """After the last token's event: the closing events and the end of the body."""
        return DONE + END

    def whole(self, text: str) -> bytes:
        """A non-streaming reply's body, whose output is `text`."""
        raise NotImplementedError

    def error_event(self, msg: str) -> bytes:
        """An error inside the 200 stream, as the server sends it, and the end of the body."""
        return frame(b"data: %s\n\n" % orjson.dumps({"error": {"message": msg}})) + DONE + END


class Responses(EventFormat):
    """The OpenAI Responses API (/v1/responses): numbered typed events around a message item."""

    def __init__(self, st: Any) -> None:
        super().__init__(st)
        self.seq_no = 0  # sequence_number

    def _event_of(self, typ: str, **fields) -> bytes:
        self.seq_no += 1
        return sse_event(typ, {"type": typ, "sequence_number": self.seq_no - 1, **fields})

    def _response(self, status: str, output: list, usage: dict | None = None) -> dict:
        obj = {
            "id": "resp_" + self.oid,
            "object": "response",
            "created_at": int(time.time()),
            "model": self.st.app.opts.model,
            "status": status,
            "incomplete_details": None,
            "output": output,
        }
        if status == "incomplete":
            obj["incomplete_details"] = {"reason": "max_output_tokens"}
        if usage is not None:
            obj["usage"] = usage
        return obj

    def _usage(self, n: int) -> dict:
        st = self.st
        return {
            "input_tokens": st.n_in,
            "input_tokens_details": {"cached_tokens": st.n_cached},
            "output_tokens": n,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": st.n_in + n,
        }

    def _message(self, status: str, content: list) -> dict:
        """The reply's message item, as the events and the whole response carry it."""
        return {"id": "msg_" + self.oid, "type": "message", "status": status, "role": "assistant", "content": content}

    def _status(self) -> str:
        return "incomplete" if self.st.reason == "length" else "completed"

    def preamble(self) -> bytes:
        item = self._message("in_progress", [])
        return b"".join(
            (
                self._event_of("response.created", response=self._response("in_progress", [])),
                self._event_of("response.in_progress", response=self._response("in_progress", [])),
                self._event_of("response.output_item.added", output_index=0, item=item),
                self._event_of(
                    "response.content_part.added",
                    item_id="msg_" + self.oid,
                    output_index=0,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                ),
            )
        )

    def event(self, word: str, last: bool, k: int = 1) -> bytes:
        self.text += word
        return self._event_of(
            "response.output_text.delta",
            item_id="msg_" + self.oid,
            output_index=0,
            content_index=0,
            delta=word,
            logprobs=[],
        )

    def closing(self) -> bytes:
        part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
        item = self._message("completed", [part])
        return b"".join(
            (
                self._event_of(
                    "response.output_text.done",
                    item_id="msg_" + self.oid,
                    output_index=0,
                    content_index=0,
                    text=self.text,
                    logprobs=[],
                ),
                self._event_of(
                    "response.content_part.done", item_id="msg_" + self.oid, output_index=0, content_index=0, part=part
                ),
                self._event_of("response.output_item.done", output_index=0, item=item),
                self._event_of(
                    "response.completed", response=self._response(self._status(), [item], self._usage(self.st.n_out))
                ),
                END,
            )
        )

    def whole(self, text: str) -> bytes:
        part = {"type": "output_text", "text": text, "annotations": []}
        item = self._message("completed", [part])
        return orjson.dumps(self._response(self._status(), [item], self._usage(self.st.n_out)))

    def error_event(self, msg: str) -> bytes:
        return self._event_of("error", code="internal_error", message=msg, param=None) + END


class Anthropic(EventFormat):
    """Anthropic Messages (/v1/messages): a message start, text deltas, a delta with the usage."""

    def _usage(self, n: int) -> dict:
        """Anthropic's input_tokens excludes cache reads (cache_read_input_tokens, prefix cache only)."""
        st = self.st
        if st.items is None:
            return {"input_tokens": st.n_in, "output_tokens": n}
        c = st.n_cached
        return {"input_tokens": st.n_in - c, "cache_read_input_tokens": c, "output_tokens": n}

    def _stop(self) -> str:
        return "max_tokens" if self.st.reason == "length" else "end_turn"

    def preamble(self) -> bytes:
        message = {
            "id": "msg_" + self.oid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.st.app.opts.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.st.n_in, "cache_read_input_tokens": 0, "output_tokens": 0},
        }
        return sse_event("message_start", {"type": "message_start", "message": message}) + sse_event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )

    def event(self, word: str, last: bool, k: int = 1) -> bytes:
        self.text += word
        return sse_event(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}},
        )

    def closing(self) -> bytes:
        return b"".join(
            (
                sse_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
                sse_event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": self._stop(), "stop_sequence": None},
                        "usage": self._usage(self.st.n_out),
                    },
                ),
                sse_event("message_stop", {"type": "message_stop"}),
                END,
            )
        )

    def whole(self, text: str) -> bytes:
        return orjson.dumps(
            {
                "id": "msg_" + self.oid,
                "type": "message",
                "role": "assistant",
                "model": self.st.app.opts.model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": self._stop(),
                "stop_sequence": None,
                "usage": self._usage(self.st.n_out),
            }
        )

    def error_event(self, msg: str) -> bytes:
        return sse_event("error", {"type": "error", "error": {"type": "api_error", "message": msg}}) + END


class SGLang(EventFormat):
    """SGLang's native /generate: each event carries the whole text so far and its meta_info."""

    def _reason(self, n: int) -> dict:
        return {"type": "length", "length": n} if self.st.reason == "length" else {"type": "stop", "matched": 2}

    def event(self, word: str, last: bool, k: int = 1) -> bytes:
        self.text += word
        st = self.st
        n = st.n_out
        meta = {
            "id": st.rid,
            "finish_reason": self._reason(n) if last else None,
            "prompt_tokens": st.n_in,
            "weight_version": "default",
            "completion_tokens": n,
            "cached_tokens": st.n_cached,
        }
        return frame(b"data: %s\n\n" % orjson.dumps({"text": self.text, "meta_info": meta}))

    def whole(self, text: str) -> bytes:
        st = self.st
        n = st.n_out
        return orjson.dumps(
            {
                "text": text,
                "meta_info": {
                    "id": st.rid,
                    "finish_reason": self._reason(n),
                    "prompt_tokens": st.n_in,
                    "completion_tokens": n,
                    "cached_tokens": st.n_cached,
                },
            }
        )


FINGERPRINT = "llm-locust-sim"
TAIL = {
    False: b'","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]',
    True: b'"},"logprobs":null,"finish_reason":null,"token_ids":null}]',
}
TAIL_END = {
    False: b'","logprobs":null,"finish_reason":"%s","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]',
    True: b'"},"logprobs":null,"finish_reason":"%s","stop_reason":null,"token_ids":null}]',
}


class OpenAI(EventFormat):
    """OpenAI completions and chat completions, as vLLM sends them: the common chunk (one word, no
    usage, not the last) pre-rendered per vocabulary word (`mids`), the rest rendered per chunk;
    a chat stream opens with the assistant's role, a tool call streams its arguments."""

    def __init__(self, st: Any, chat: bool, mids: dict[str, bytes]) -> None:
        super().__init__(st)
        self.chat = chat
        self.mids = mids  # vocabulary word -> the word and the tail of a non-final chunk without usage
        self.plain = False  # every chunk after the first is a common one (set with the first chunk)
        app = st.app
        self.head_json = b'{"id":"%s-%016x","object":"%s","created":%d,"model":"%s"' % (
            b"chatcmpl" if chat else b"cmpl",
            app.n_requests,
            b"chat.completion.chunk" if st.stream and chat else b"chat.completion" if chat else b"text_completion",
            int(time.time()),
            app.model_b,
        )
        self.prefix = (
            b"data: "
            + self.head_json
            + (b',"choices":[{"index":0,"delta":{"content":"' if chat else b',"choices":[{"index":0,"text":"')
        )

    def event(self, word: str, last: bool, k: int = 1) -> bytes:
        if self.plain and k == 1 and not last:  # per token: one lookup, one format
            mid = self.mids[word]
            return b"%x\r\n%b%b\r\n" % (len(self.prefix) + len(mid), self.prefix, mid)
        st = self.st
        n = st.n_out
        if n == k:  # without usage per chunk, a tool call or a graded answer: pre-rendered from now on
            self.plain = not st.cont and st.tool_name is None and st.answer is None
        first = b""
        if n == k and self.chat:
            first = frame(
                b"data: " + self.head_json + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                b'"logprobs":null,"finish_reason":null}]'
                + self._usage_field(0)
                + b',"prompt_token_ids":null,"prompt_text":null}\n\n'
            )
        if st.tool_name is not None:
            return first + self._tool_chunk(n, k, word, last)
        if last or st.cont or k > 1 or st.answer is not None:
            tail = TAIL_END[self.chat] % st.reason.encode() if last else TAIL[self.chat]
            raw = orjson.dumps(word)[1:-1] if st.answer is not None else word.encode()
            body = self.prefix + raw + tail + self._usage_field(n) + (self._timings(n) if last else b"") + b"}\n\n"
            return first + frame(body)
        mid = self.mids[word]
        return first + b"%x\r\n%b%b\r\n" % (len(self.prefix) + len(mid), self.prefix, mid)

    def _tool_chunk(self, n: int, k: int, text: str, last: bool) -> bytes:
        """A chat chunk whose tokens are a tool call's: the call's id and name with the first
        tokens, then argument pieces (as vLLM streams them); finish_reason "tool_calls"."""
        st = self.st
        call: dict = {"index": 0, "function": {"arguments": text}}
        if n == k:
            call.update(id=f"call_{st.rid}", type="function")
            call["function"] = {"name": st.tool_name, "arguments": text}
        obj = orjson.loads(self.head_json + b"}")
        obj["choices"] = [
            {
                "index": 0,
                "delta": {"tool_calls": [call]},
                "logprobs": None,
                "finish_reason": st.reason if last else None,
            }
        ]
        if st.cont:
            obj["usage"] = {"prompt_tokens": st.n_in, "total_tokens": st.n_in + n, "completion_tokens": n}
        return frame(b"data: " + orjson.dumps(obj) + b"\n\n")

    def _usage_field(self, n: int) -> bytes:
        st = self.st
        if not st.cont:
            return b""
        details = b',"prompt_tokens_details":{"cached_tokens":%d}' % st.n_cached if st.items is not None else b""
        return b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%b}' % (
            st.n_in,
            st.n_in + n,
            n,
            details,
        )

    def _timings(self, n: int) -> bytes:
        """llama-server's `timings` on the final chunk (only with the prefix cache: cache_n)."""
        st = self.st
        if st.items is None:
            return b""
        c = st.n_cached
        return b',"timings":{"cache_n":%d,"prompt_n":%d,"predicted_n":%d}' % (c, st.n_in - c, n)

    def _usage(self) -> dict:
        st = self.st
        n = st.n_out
        usage: dict = {"prompt_tokens": st.n_in, "total_tokens": st.n_in + n, "completion_tokens": n}
        if st.items is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": st.n_cached}
        return usage

    def closing(self) -> bytes:
        if not self.st.usage:  # stream_options.include_usage: a last chunk with the usage alone
            return DONE + END
        return (
            frame(
                b"data: "
                + self.head_json
                + b',"choices":[],"usage":'
                + orjson.dumps(self._usage())
                + b',"system_fingerprint":"'
                + FINGERPRINT.encode()
                + b'"}\n\n'
            )
            + DONE
            + END
        )

    def whole(self, text: str) -> bytes:
        st = self.st
        if st.answer is not None:  # a graded question's reply (the other formats answer with the vocabulary)
            text = "".join(st.answer[: st.n_out])
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}} if self.chat else {"index": 0, "text": text}
        )
        choice.update(logprobs=None, finish_reason=st.reason, stop_reason=None)
        return (
            self.head_json + b',"choices":[' + orjson.dumps(choice) + b'],"usage":' + orjson.dumps(self._usage()) + b"}"
        )

    def error_event(self, msg: str) -> bytes:
        err = json.dumps({"error": {"message": msg, "type": "InternalServerError", "param": None, "code": 500}})
        return frame(b"data: %s\n\n" % err.encode()) + DONE + END


def mids(vocab: list[str], chat: bool) -> dict[str, bytes]:
    """OpenAI's common chunk per vocabulary word, rendered once: the word and the chunk's tail."""
    return {w: w.encode() + TAIL[chat] + b"}\n\n" for w in vocab}


def make_format(name: str, st: Any, vocab_mids: dict[bool, dict[str, bytes]]) -> EventFormat:
    """The format of a generation route (server.ROUTES) for one stream."""
    if name in ("completions", "chat"):
        return OpenAI(st, name == "chat", vocab_mids[name == "chat"])
    return {"responses": Responses, "anthropic": Anthropic, "sglang": SGLang}[name](st)

"""The wire formats rendered one JSON event per token: the OpenAI Responses API, Anthropic
Messages and SGLang's native /generate, one class each. A stream (server.Stream) asks its format
for what goes before the first token, each token's event, the closing events, a non-streaming
reply's object and an error inside the stream; the engine, pacing, faults and ground truth are the
stream's, the same for every format. OpenAI's completions and chat formats are the stream's own
pre-rendered bytes (the simulator's fast path)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from llm_locust.sim.http import DONE, END, frame


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

    def event(self, word: str, last: bool) -> bytes:
        """The event of one token (word)."""
        raise NotImplementedError

    def closing(self) -> bytes:
        """After the last token's event: the closing events and the end of the body."""
        return DONE + END

    def whole(self, text: str) -> dict:
        """A non-streaming reply's object, whose output is `text`."""
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

    def _status(self) -> str:
        return "incomplete" if self.st.reason == "length" else "completed"

    def preamble(self) -> bytes:
        item = {"id": "msg_" + self.oid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
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

    def event(self, word: str, last: bool) -> bytes:
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
        item = {
            "id": "msg_" + self.oid,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
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

    def whole(self, text: str) -> dict:
        part = {"type": "output_text", "text": text, "annotations": []}
        item = {
            "id": "msg_" + self.oid,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
        return self._response(self._status(), [item], self._usage(self.st.n_out))

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

    def event(self, word: str, last: bool) -> bytes:
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

    def whole(self, text: str) -> dict:
        return {
            "id": "msg_" + self.oid,
            "type": "message",
            "role": "assistant",
            "model": self.st.app.opts.model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": self._stop(),
            "stop_sequence": None,
            "usage": self._usage(self.st.n_out),
        }

    def error_event(self, msg: str) -> bytes:
        return sse_event("error", {"type": "error", "error": {"type": "api_error", "message": msg}}) + END


class SGLang(EventFormat):
    """SGLang's native /generate: each event carries the whole text so far and its meta_info."""

    def _reason(self, n: int) -> dict:
        return {"type": "length", "length": n} if self.st.reason == "length" else {"type": "stop", "matched": 2}

    def event(self, word: str, last: bool) -> bytes:
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

    def whole(self, text: str) -> dict:
        st = self.st
        n = st.n_out
        return {
            "text": text,
            "meta_info": {
                "id": st.rid,
                "finish_reason": self._reason(n),
                "prompt_tokens": st.n_in,
                "completion_tokens": n,
                "cached_tokens": st.n_cached,
            },
        }


# generation route's format (server.ROUTES) -> its class; the two OpenAI formats are not here
FORMATS: dict[str, type[EventFormat]] = {"responses": Responses, "anthropic": Anthropic, "sglang": SGLang}

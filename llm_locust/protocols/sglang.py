"""SGLang's native streaming: POST /generate with `stream: true`.

Request: `{"text": PROMPT, "sampling_params": {"max_new_tokens": N, "ignore_eos": true},
"stream": true}` (no model field: the server serves one model).

Each event is `data: {"text": ..., "output_ids": [...], "meta_info": {...}}\\n\\n`, then
`data: [DONE]\\n\\n` (the end marker). `text` is the whole output so far (cumulative), or only
the new piece when the server runs with `--incremental-streaming-output`: the adapter takes the
new part either way. `meta_info` carries on every event `prompt_tokens`, `completion_tokens`
(the running output count) and `cached_tokens`, and `finish_reason`: null until the last
event, then an object such as `{"type": "length", "length": 16}`, `{"type": "stop", "matched":
2}` or `{"type": "abort", "message": "..."}` (an abort is the stream's error).

So an event carries tokens when `completion_tokens` grew (an event whose bytes ended inside a
UTF-8 character has no new text, but its token counts): n_k per event is the difference, exact,
like vLLM's continuous usage. Without counts, an event with new text is one token chunk.
An error is `data: {"error": {"message": "..."}}` followed by `[DONE]`. Cached prompt tokens go
to `state.usage_cached` (and `state.extra["details"]["cached_tokens"]`).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from llm_locust.protocols.base import CONTENT, NO_TOKEN, RequestSpec, StreamState
from llm_locust.protocols.openai import event_object, set_error, spec_prompt, token_count, wrong_type


class SGLangAdapter:
    name = "sglang-generate"
    framing = "sse"
    end_marker = True
    path = "/generate"

    def __repr__(self) -> str:
        return f"SGLangAdapter({self.name!r})"

    def request(self, spec: RequestSpec) -> tuple[str, bytes]:
        params: dict[str, Any] = {}
        if spec.max_tokens is not None:
            params["max_new_tokens"] = spec.max_tokens
        if spec.force_length:
            params["ignore_eos"] = True
        body: dict[str, Any] = {"text": spec_prompt(spec), "sampling_params": params, "stream": True}
        body.update(spec.extra_body)
        return self.path, orjson.dumps(body)

    def read_events(self, buf: bytes, pos: int, end: int, state: StreamState) -> tuple[int, int]:
        """Counts of the mid-stream events at buf[pos:end], read in place (read_events below)."""
        return read_events(buf, pos, end, state)

    def feed(self, payload: bytes, state: StreamState) -> int:  # noqa: C901 (per-event hot path: one pass over one event, no call per field)
        if not state.keep_text and len(payload) >= COUNTS_ONLY_FROM:
            kind = _counts_only(payload, state)
            if kind is not None:
                return kind
        obj = event_object(payload, state)
        if obj is None:
            return NO_TOKEN
        err = obj.get("error")
        if err is not None:
            set_error(state, err)
            return NO_TOKEN
        meta = obj.get("meta_info")
        if meta is None:
            meta = {}
        elif type(meta) is not dict:
            raise wrong_type("meta_info", meta, "an object")
        text = obj.get("text")
        piece = ""
        if text:
            if type(text) is not str:
                raise wrong_type("text", text, "a string")
            prev = state.aux  # the whole output so far
            if not prev:
                piece = state.aux = text
            elif text.startswith(prev):  # cumulative text (the default)
                piece = text[len(prev) :]
                state.aux = text
            else:  # incremental streaming output: the new piece only
                piece = text
                state.aux = prev + text
            if piece and state.keep_text:
                state.text.append(piece)
        kind = NO_TOKEN
        count = meta.get("completion_tokens")
        if count is not None:
            count = token_count(count, "meta_info.completion_tokens")
            prev_count = state.cont_out or 0
            if count > prev_count:
                kind = CONTENT
                if not state.cont_broken:
                    state.cont_tokens.append(count - prev_count)
                state.cont_out = count
        elif piece:
            kind = CONTENT
            state.cont_tokens.clear()
            state.cont_broken = True
        finish = meta.get("finish_reason")
        if finish is not None:
            _finish(finish, meta, count, state)
        return kind


# Events at least this long, when the text is not kept, are read for their counts alone (below).
COUNTS_ONLY_FROM = 512
_META_KEY = b'"meta_info":'


def _counts_only(payload: bytes, state: StreamState) -> int | None:
    """The event's kind from its `meta_info` alone, or None to read the whole event.

    With cumulative text (SGLang's default) every event repeats the whole output so far, text
    and token ids: a 256-token reply is ~5.6x the bytes of an OpenAI stream, and parsing all of it
    made this adapter ~3x dearer a token. Only the counts are needed when the text is not kept,
    and `meta_info` follows `text` and `output_ids` on the wire, so the bytes from its key to the
    end, behind a `{`, are a JSON object of their own. A key can only be matched outside strings
    (a quote inside a JSON string is escaped); any surprise (no such key, not an object there,
    an `error`, no running count, the last event with its finish reason) reads the event whole,
    so the last event is always checked in full."""
    i = payload.rfind(_META_KEY)
    if i < 0:
        return None
    try:
        tail = orjson.loads(b"{" + payload[i:])
    except orjson.JSONDecodeError:
        return None
    meta = tail.get("meta_info")
    if type(meta) is not dict or "error" in tail or meta.get("finish_reason") is not None:
        return None
    count = meta.get("completion_tokens")
    if count is None:
        return None
    count = token_count(count, "meta_info.completion_tokens")
    prev_count = state.cont_out or 0
    if count <= prev_count:
        return NO_TOKEN
    if not state.cont_broken:
        state.cont_tokens.append(count - prev_count)
    state.cont_out = count
    return CONTENT


_NULL_FINISH = b'"finish_reason":null'
# the running count: at most 9 digits (token_count's bound, MAX_TOKEN_COUNT), then the next key or the end
_COUNT = re.compile(rb'"completion_tokens":(\d{1,9})[,}]')


def read_events(buf: bytes, pos: int, end: int, state: StreamState) -> tuple[int, int]:
    """Read the counts of the mid-stream events at the start of buf[pos:end] without cutting
    them out: (how many carried tokens, where the first event it did not read starts).

    For a stream whose text is not kept (see SSEDecoder.read_events): one-line `data: {...}`
    events separated by single blank lines. An event is read here only when it ends with its
    `meta_info` object (`...}}`), holds `"finish_reason":null` and then
    `"completion_tokens":<digits>` (neither pattern can match inside a JSON string, where a
    quote is always escaped), and has no `"error":` key after that; the count is taken as
    the per-event path would take it. The first event that is anything else (the last event
    with its finish reason and usage, an error, [DONE], another shape) stops the scan: the
    caller reads it and what follows event by event, in full. Cutting and parsing each event
    (~1.5 KB with cumulative text and ids) cost more than half of this API's ingest; this
    costs a few memchr-speed finds an event."""
    if state.cont_broken:
        return 0, pos
    find, rfind, at = buf.find, buf.rfind, buf.startswith
    count_after = _COUNT.search
    prev = state.cont_out or 0
    tokens = state.cont_tokens
    n = 0
    if not at(b"data: {", pos):
        return 0, pos
    while pos < end:
        e = find(b"\n", pos, end)
        if e < 0:
            e = end
            if not at(b"}}", e - 2):
                break
        # the event ends with meta_info's and its own braces, and the next one is `data: {`
        elif not at(b"}}\n\ndata: {", e - 2):
            break
        f = rfind(_NULL_FINISH, pos, e)
        if f < 0:
            break
        m = count_after(buf, f, e)
        if m is None or find(b'"error":', f, e) >= 0:
            break
        count = int(m[1])
        if count > prev:
            tokens.append(count - prev)
            prev = count
            n += 1
        pos = e + 2
    if n:
        state.cont_out = prev
    return n, pos


def _finish(finish: Any, meta: dict[str, Any], count: int | None, state: StreamState) -> None:
    if type(finish) is dict:
        reason = finish.get("type")
        if reason is not None and type(reason) is not str:
            raise wrong_type("meta_info.finish_reason.type", reason, "a string")
        if reason == "abort":
            message = finish.get("message")
            set_error(state, message if message else "request aborted by the server")
    elif type(finish) is str:
        reason = finish
    else:
        raise wrong_type("meta_info.finish_reason", finish, "an object")
    state.finish_reason = reason
    if count is not None:
        state.usage_out = count
    prompt = meta.get("prompt_tokens")
    if prompt is not None:
        state.usage_in = token_count(prompt, "meta_info.prompt_tokens")
    cached = meta.get("cached_tokens")
    if cached is not None:
        state.usage_cached = token_count(cached, "meta_info.cached_tokens")
        state.extra["details"] = {"cached_tokens": state.usage_cached}


SGLANG = SGLangAdapter()

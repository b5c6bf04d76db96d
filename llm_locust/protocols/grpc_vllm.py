"""vLLM's gRPC Generate API (the `VllmEngine` service of `smg-grpc-proto`, served by
`vllm serve --grpc` with `smg-grpc-servicer`): the request and reply messages, encoded and
decoded by hand. Pure: no grpcio, no protobuf runtime, no sockets.

Why by hand: the generated `vllm_engine_pb2` needs a protobuf runtime of the generation's
version, and llm-locust needs only a few fields of two messages. The field numbers are those of
`smg_grpc_proto/proto/vllm_engine.proto` (package `vllm.grpc.engine`, checked against
smg-grpc-proto 0.4.28); tests/test_real_grpc.py runs the codec against a real server.

The wire: one `GenerateRequest` (request_id, `text` or `tokenized.input_ids`, sampling params,
stream=true); the reply stream is `GenerateResponse` messages, each a `chunk` (the new token ids
of one engine step, with `completion_tokens` = their count, `prompt_tokens`, `cached_tokens`)
or, last, a `complete` (finish_reason; in streaming mode its ids repeat the last chunk's, so
they are not counted again). The engine does not detokenize: there is no text, only token ids,
so output tokens are exact (the server's own per-chunk counts) and the record's text is None.

Unlike the HTTP APIs the request carries no model name (a server serves one model); the client
checks a requested name against GetModelInfo's `served_model_name` (see transport.grpc_io).
"""

from __future__ import annotations

import struct
from typing import Any

from llm_locust.protocols.base import CONTENT, MAX_TOKEN_COUNT, NO_TOKEN, ProtocolError, RequestSpec, StreamState

SERVICE = "vllm.grpc.engine.VllmEngine"
GENERATE = f"/{SERVICE}/Generate"
GET_MODEL_INFO = f"/{SERVICE}/GetModelInfo"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
NAME = "vllm-grpc"

# SamplingParams fields (vllm_engine.proto) that extra_body may set: name -> (number, kind)
_SAMPLING: dict[str, tuple[int, str]] = {
    "temperature": (1, "float"),
    "top_p": (2, "float"),
    "top_k": (3, "uint"),
    "min_p": (4, "float"),
    "frequency_penalty": (5, "float"),
    "presence_penalty": (6, "float"),
    "repetition_penalty": (7, "float"),
    "max_tokens": (8, "uint"),
    "min_tokens": (9, "uint"),
    "ignore_eos": (14, "bool"),
    "seed": (24, "int"),
}
# GenerateRequest fields extra_body may set besides the sampling ones
_PROMPT_IDS = "prompt_token_ids"  # a list of token ids: sent as `tokenized.input_ids`


# ------------------------------------------------------------------------------ encoding
def _varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1  # int32/int64 negatives: ten-byte two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _len_field(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _varint(len(data)) + data


def _scalar(number: int, kind: str, value: Any, name: str) -> bytes:
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, got {value!r}")
        return _key(number, 5) + struct.pack("<f", float(value))
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return _key(number, 0) + _varint(int(value))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if kind == "uint" and not 0 <= value < 2**32:
        raise ValueError(f"{name} must be an integer in [0, 2^32), got {value}")
    if kind == "int" and not -(2**31) <= value < 2**31:
        raise ValueError(f"{name} must be a 32-bit integer, got {value}")
    return _key(number, 0) + _varint(value)


def render_messages(messages: list[dict[str, Any]]) -> str:
    """Chat messages as one plain-text prompt ("role: content" lines, then "assistant:").

    The gRPC API takes text or token ids, not messages: the model's chat template is the
    caller's business (the SMG router applies it). Give `prompt` (or prompt_token_ids in
    extra_body) for exact control of what the engine sees."""
    lines = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        lines.append(f"{m.get('role', 'user')}: {content if content is not None else ''}")
    lines.append("assistant:")
    return "\n".join(lines)


def encode_generate(spec: RequestSpec, request_id: str) -> bytes:
    """A streaming GenerateRequest for `spec` (greedy unless extra_body sets temperature).

    Raises ValueError for what the API cannot carry (an unknown extra_body key, a wrong type)."""
    extra = dict(spec.extra_body or {})
    prompt_ids = extra.pop(_PROMPT_IDS, None)
    sampling: dict[str, Any] = {"temperature": 0.0}
    if spec.max_tokens is not None:
        sampling["max_tokens"] = spec.max_tokens
        if spec.force_length:
            sampling["min_tokens"] = spec.max_tokens
            sampling["ignore_eos"] = True
    for name in list(extra):
        if name not in _SAMPLING:
            raise ValueError(
                f"extra_body key {name!r} is not a field the vLLM gRPC API takes here "
                f"(known: {', '.join(sorted([*_SAMPLING, _PROMPT_IDS]))})"
            )
        sampling[name] = extra.pop(name)
    params = b"".join(_scalar(*_SAMPLING[k], v, k) for k, v in sampling.items() if v is not None)

    out = _len_field(1, request_id.encode("utf-8"))
    if prompt_ids is not None:
        if not isinstance(prompt_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in prompt_ids
        ):
            raise ValueError(f"{_PROMPT_IDS} must be a list of non-negative token ids")
        packed = b"".join(_varint(t) for t in prompt_ids)
        out += _len_field(2, _len_field(2, packed))  # tokenized { input_ids (packed) }
    else:
        if spec.prompt is not None:
            text = spec.prompt
        elif spec.messages is not None:
            text = render_messages(spec.messages)
        else:
            raise ValueError("a gRPC request needs a prompt, messages or extra_body.prompt_token_ids")
        out += _len_field(3, text.encode("utf-8"))
    out += _len_field(4, params)
    out += _key(5, 0) + _varint(1)  # stream = true
    return out


def encode_health_check(service: str = "") -> bytes:
    return _len_field(1, service.encode("utf-8")) if service else b""


# ------------------------------------------------------------------------------ decoding
def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ProtocolError("truncated varint in a gRPC message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtocolError("varint over 10 bytes in a gRPC message")


def _fields(buf: bytes, start: int = 0, end: int | None = None):
    """(number, wire type, value) for each field: an int for varints and fixed ones, a
    (start, end) pair for length-delimited ones."""
    end = len(buf) if end is None else end
    pos = start
    value: int | tuple[int, int]
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtocolError("field number 0 in a gRPC message")
        if wire == 0:
            value, pos = _read_varint(buf, pos, end)
        elif wire == 2:
            n, pos = _read_varint(buf, pos, end)
            if n > end - pos:
                raise ProtocolError("a length-delimited field runs past the end of its gRPC message")
            value = (pos, pos + n)
            pos += n
        elif wire == 1:
            if pos + 8 > end:
                raise ProtocolError("truncated fixed64 in a gRPC message")
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == 5:
            if pos + 4 > end:
                raise ProtocolError("truncated fixed32 in a gRPC message")
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise ProtocolError(f"unsupported wire type {wire} (field {number}) in a gRPC message")
        yield number, wire, value


def _count(value: int, what: str) -> int:
    if value > MAX_TOKEN_COUNT:
        raise ProtocolError(f"implausible {what} {value} in a gRPC reply")
    return value


def _token_ids(buf: bytes, wire: int, value) -> int:
    """How many ids one occurrence of a repeated uint32 field holds (packed or not)."""
    if wire == 0:
        return 1
    if wire != 2:
        raise ProtocolError(f"token ids with wire type {wire} in a gRPC reply")
    start, end = value
    n, pos = 0, start
    while pos < end:
        _, pos = _read_varint(buf, pos, end)
        n += 1
    return n


def _text(buf: bytes, wire: int, value, what: str) -> str:
    if wire != 2:
        raise ProtocolError(f"{what} with wire type {wire} in a gRPC reply")
    try:
        return buf[value[0] : value[1]].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{what} is not UTF-8 in a gRPC reply") from None


def feed_response(payload: bytes, state: StreamState) -> int:
    """Read one GenerateResponse message into `state`; CONTENT when it carried output tokens.

    state.cont_tokens gets each token-bearing chunk's token count; state.usage_out the sum of
    the server's per-chunk `completion_tokens`; state.usage_in its `prompt_tokens`;
    state.extra["cached_tokens"]; finish_reason and done from `complete` (a finish_reason of
    "error" or "abort" sets state.error). Only choice 0 is read (the client asks for n=1)."""
    n = len(payload)
    # the usual message: one small chunk, its packed token ids first, then the same counts as the
    # message before (prompt, completion 1, cached): those are read once a stream (state.aux)
    if (
        4 < n < 130
        and payload[0] == 0x0A
        and payload[1] == n - 2
        and payload[2] == 0x0A
        and payload[3] < 0x80
        and payload[3] + 4 <= n
    ):
        ids_end = payload[3] + 4
        tail = payload[ids_end:]
        known = state.aux
        if known is None or known[0] != tail:
            counts = _chunk_counts(tail)
            known = state.aux = (tail, counts) if counts is not None else None
        if known is not None:
            return _apply_chunk(state, len(payload[4:ids_end].translate(None, _HIGH_BYTES)), *known[1])
    kind = NO_TOKEN
    seen = False
    for number, wire, value in _fields(payload):
        if number not in (1, 2):
            continue
        if wire != 2:
            raise ProtocolError(f"GenerateResponse field {number} with wire type {wire}")
        if seen:
            raise ProtocolError("a GenerateResponse with both a chunk and a complete")
        seen = True
        start, end = value
        if number == 1:
            kind = _feed_chunk(payload, start, end, state)
        else:
            _feed_complete(payload, start, end, state)
    if not seen:
        raise ProtocolError("a GenerateResponse with neither a chunk nor a complete")
    return kind


_HIGH_BYTES = bytes(range(128, 256))
_CHUNK_VARINTS = {0x10: 0, 0x18: 1, 0x20: 2, 0x38: 3}  # the keys of fields 2, 3, 4 and 7 as varints


def _chunk_counts(buf: bytes) -> tuple | None:
    """(prompt_tokens, completion_tokens, cached_tokens, index) from a chunk's fields after its
    token ids, when they are only those, as varints under 2^14; None for anything else (the
    general walk then reads the message, and judges it)."""
    counts = [None, 0, None, 0]
    pos, end = 0, len(buf)
    try:
        while pos < end:
            slot = _CHUNK_VARINTS.get(buf[pos])
            if slot is None:
                return None
            value = buf[pos + 1]
            if value & 0x80:
                high = buf[pos + 2]
                if high & 0x80:
                    return None
                value = (value & 0x7F) | high << 7
                pos += 3
            else:
                pos += 2
            counts[slot] = value
    except IndexError:
        return None
    return tuple(counts) if pos == end else None


def _feed_chunk(buf: bytes, start: int, end: int, state: StreamState) -> int:
    n_ids = delta = index = 0
    prompt = cached = None
    for number, wire, value in _fields(buf, start, end):
        if number == 1:
            n_ids += _token_ids(buf, wire, value)
        elif number == 2 and wire == 0:
            prompt = _count(value, "prompt_tokens")
        elif number == 3 and wire == 0:
            delta = _count(value, "completion_tokens")
        elif number == 4 and wire == 0:
            cached = _count(value, "cached_tokens")
        elif number == 7 and wire == 0:
            index = value
    return _apply_chunk(state, n_ids, prompt, delta, cached, index)


def _apply_chunk(state: StreamState, n_ids: int, prompt: int | None, delta: int, cached: int | None, index: int) -> int:
    if index != 0:
        return NO_TOKEN  # another choice (n > 1): not asked for
    if prompt:
        state.usage_in = prompt
    if cached is not None:
        state.extra["cached_tokens"] = cached
        state.usage_cached = cached
    if delta:
        state.usage_out = (state.usage_out or 0) + delta
        if state.usage_out > MAX_TOKEN_COUNT:
            raise ProtocolError(f"implausible completion_tokens total {state.usage_out} in a gRPC reply")
    if state.done:
        raise ProtocolError("a GenerateResponse chunk after the complete message")
    if not n_ids:
        return NO_TOKEN
    state.cont_tokens.append(n_ids)
    state.read_out = (state.read_out or 0) + n_ids
    return CONTENT


def _feed_complete(buf: bytes, start: int, end: int, state: StreamState) -> None:
    finish = None
    index = 0
    prompt = None
    for number, wire, value in _fields(buf, start, end):
        if number == 2:
            finish = _text(buf, wire, value, "finish_reason")
        elif number == 3 and wire == 0:
            prompt = _count(value, "prompt_tokens")
        elif number == 8 and wire == 0:
            index = value
    if index != 0:
        return
    if prompt:
        state.usage_in = prompt
    state.finish_reason = finish
    state.done = True
    if finish in ("error", "abort"):
        state.error = f"the server ended the generation with finish_reason {finish!r}"


def decode_model_info(payload: bytes) -> dict[str, str]:
    """GetModelInfoResponse: model_path (1), served_model_name (6), tokenizer_path (7)."""
    names = {1: "model_path", 6: "served_model_name", 7: "tokenizer_path"}
    out: dict[str, str] = {}
    for number, wire, value in _fields(payload):
        if number in names:
            out[names[number]] = _text(payload, wire, value, names[number])
    return out


def decode_health(payload: bytes) -> int:
    """grpc.health.v1 HealthCheckResponse.status: 1 = SERVING, 2 = NOT_SERVING, 0 = UNKNOWN."""
    for number, wire, value in _fields(payload):
        if number == 1 and wire == 0:
            return value
    return 0

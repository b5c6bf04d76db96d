"""Wire formats: a registry of adapters by API name, and their stream decoders."""

from __future__ import annotations

import functools
from typing import Any

import orjson

from llm_locust.protocols import ollama, openai
from llm_locust.protocols.anthropic import ANTHROPIC
from llm_locust.protocols.base import (
    CONTENT,
    MAX_EVENT_BYTES,
    NO_TOKEN,
    REASONING,
    TOOL_CALL,
    Adapter,
    Limits,
    ProtocolError,
    RequestSpec,
    StreamState,
    UnknownAPI,
    request_headers,
    resolve_tokens,
)
from llm_locust.protocols.embeddings import JSON_ADAPTERS
from llm_locust.protocols.llamacpp import LlamaCppAdapter
from llm_locust.protocols.openai import brief
from llm_locust.protocols.responses import RESPONSES
from llm_locust.protocols.sglang import SGLANG
from llm_locust.protocols.sse import NDJSONDecoder, SSEDecoder
from llm_locust.protocols.tgi import TGIAdapter
from llm_locust.protocols.triton import TritonAdapter

_ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        openai.COMPLETIONS,
        openai.CHAT,
        TGIAdapter(),
        TritonAdapter(),
        LlamaCppAdapter(),
        ollama.GENERATE,
        ollama.CHAT,
        RESPONSES,
        ANTHROPIC,
        SGLANG,
    )
}
API_NAMES: tuple[str, ...] = tuple(_ADAPTERS)
# take messages rather than a prompt (the server applies a chat template)
# APIs over gRPC (HTTP/2), not HTTP/1.1 streams: their own client (transport.grpc_io), no adapter
GRPC_APIS: tuple[str, ...] = ("vllm-grpc",)
CHAT_APIS = ("openai-chat", "ollama-chat", "openai-responses", "anthropic-messages")
# list their models at /v1/models, and their paths start with /v1
OPENAI_APIS = ("openai-chat", "openai-completions", "openai-responses", "anthropic-messages")


def get_adapter(name: str) -> Adapter:
    """The adapter for an API name. Adapters keep no per-request state: share them freely."""
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise UnknownAPI(f"unknown API {name!r}; valid: {', '.join(API_NAMES)}") from None


# request kinds whose reply is one JSON document (embeddings, rerank, score): the scenario API's
# embed() / rerank() / score(), sent by transport.http.JSONClient; not `--api` choices
JSON_API_NAMES: tuple[str, ...] = tuple(JSON_ADAPTERS)


def get_json_adapter(name: str):
    """The adapter of a non-streaming request kind (protocols.embeddings)."""
    try:
        return JSON_ADAPTERS[name]
    except KeyError:
        raise UnknownAPI(f"unknown request kind {name!r}; valid: {', '.join(JSON_API_NAMES)}") from None


def make_decoder(
    adapter: Adapter, max_event_bytes: int = MAX_EVENT_BYTES, state: StreamState | None = None
) -> SSEDecoder | NDJSONDecoder:
    """A fresh decoder (one per response) for the adapter's framing; an event (or NDJSON line)
    longer than max_event_bytes is a ProtocolError.

    Given the response's state, when the text is not kept, an adapter with `read_events`
    (SGLang's) reads mid-stream events' counts in place (see SSEDecoder.read_events): feed may then
    return an int first, the number of token-bearing events it read that way."""
    if adapter.framing == "ndjson":
        return NDJSONDecoder(max_event_bytes)
    if adapter.framing == "sse":
        decoder = SSEDecoder(max_event_bytes)
        read_events = getattr(adapter, "read_events", None)
        if read_events is not None and state is not None and not state.keep_text:
            decoder.read_events = functools.partial(read_events, state=state)
        return decoder
    raise ValueError(f"unknown framing {adapter.framing!r} of adapter {adapter.name!r}")


def error_text(body: bytes, limit: int = 300) -> str:
    """A readable message from an HTTP error body: the JSON message if any, else the text.

    Never raises, whatever the body (binary, invalid UTF-8, deeply nested JSON)."""
    msg: Any = None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        for key in ("error", "message", "detail"):
            value = obj.get(key)
            if value:
                msg = value
                break
        if isinstance(msg, dict):
            msg = msg.get("message") or msg.get("detail") or msg
    elif isinstance(obj, str):
        msg = obj
    if msg is None:
        text = printable(body[: limit * 4])
    elif isinstance(msg, str):
        text = msg.strip()
    else:  # e.g. FastAPI's validation `detail` list
        text = brief(msg, limit)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(data: bytes) -> str:
    """Bytes from a server as text fit for an error message: control characters escaped, and
    binary data (e.g. a compressed body) named as such rather than quoted."""
    text = data.decode("utf-8", "replace").strip()
    if not text:
        return ""
    odd = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in "\t\r\n"))
    if odd * 4 > len(text):  # mostly not text: e.g. a compressed body
        return f"<{len(data)} bytes of binary data>"
    if not odd:
        return text
    return "".join(c if c >= " " or c in "\t\r\n" else repr(c)[1:-1] for c in text)


__all__ = [
    "API_NAMES",
    "GRPC_APIS",
    "JSON_API_NAMES",
    "CONTENT",
    "NO_TOKEN",
    "REASONING",
    "TOOL_CALL",
    "Adapter",
    "Limits",
    "MAX_EVENT_BYTES",
    "NDJSONDecoder",
    "ProtocolError",
    "RequestSpec",
    "SSEDecoder",
    "StreamState",
    "UnknownAPI",
    "error_text",
    "get_adapter",
    "get_json_adapter",
    "make_decoder",
    "printable",
    "request_headers",
    "resolve_tokens",
]

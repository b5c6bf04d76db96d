"""Wire formats: a registry of adapters by API name, and their stream decoders."""

from __future__ import annotations

from typing import Any

import orjson

from llm_locust.protocols import ollama, openai
from llm_locust.protocols.base import (
    CONTENT,
    NO_TOKEN,
    REASONING,
    Adapter,
    ProtocolError,
    RequestSpec,
    StreamState,
    UnknownAPI,
    resolve_tokens,
)
from llm_locust.protocols.llamacpp import LlamaCppAdapter
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
    )
}
API_NAMES: tuple[str, ...] = tuple(_ADAPTERS)
CHAT_APIS = ("openai-chat", "ollama-chat")  # take messages rather than a prompt
OPENAI_APIS = ("openai-chat", "openai-completions")  # list their models at /v1/models


def get_adapter(name: str) -> Adapter:
    """The adapter for an API name. Adapters keep no per-request state: share them freely."""
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise UnknownAPI(f"unknown API {name!r}; valid: {', '.join(API_NAMES)}") from None


def make_decoder(adapter: Adapter) -> SSEDecoder | NDJSONDecoder:
    """A fresh decoder (one per response) for the adapter's framing."""
    if adapter.framing == "ndjson":
        return NDJSONDecoder()
    if adapter.framing == "sse":
        return SSEDecoder()
    raise ValueError(f"unknown framing {adapter.framing!r} of adapter {adapter.name!r}")


def error_text(body: bytes, limit: int = 300) -> str:
    """A readable message from an HTTP error body: the JSON message if any, else the text."""
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
        text = body.decode("utf-8", "replace").strip()
    elif isinstance(msg, str):
        text = msg.strip()
    else:  # e.g. FastAPI's validation `detail` list
        text = orjson.dumps(msg).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "API_NAMES",
    "CONTENT",
    "NO_TOKEN",
    "REASONING",
    "Adapter",
    "NDJSONDecoder",
    "ProtocolError",
    "RequestSpec",
    "SSEDecoder",
    "StreamState",
    "UnknownAPI",
    "error_text",
    "get_adapter",
    "make_decoder",
    "resolve_tokens",
]

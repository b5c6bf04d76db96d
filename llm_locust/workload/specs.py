"""TraceRecord -> RequestSpec: what to send for one record of a workload. Pure.

Token-count records get a synthesised prompt of that length (with prefix blocks when the
trace has hash ids); records with text keep it. The output length is the trace's, capped or
overridden by the settings, and forced where the API allows (ignore_eos / min_tokens).

Chat requests may also carry (settings of the workload group):

- images (``--images N`` or the trace's count, e.g. Azure 2025 NumImages): the user message becomes
  content parts, the text then N ``image_url`` parts with seeded ``data:`` URLs
  (workload.images); ``file://`` image parts a trace names are read once and sent as ``data:`` URLs.
  What each request carried goes on its spec (`RequestSpec.media`), which the send path puts on
  its record, so the results count images and image bytes.
- tools (``--tools N``): N generated function definitions, the same for a seed, and ``tool_choice``.
- a response format (``--response-format schema.json``): ``response_format`` json_schema; replies
  are checked with `StructuredCheck` (a JSON-schema subset, or jsonschema when installed).
"""

from __future__ import annotations

import json
import os
import random
import re
import zlib
from pathlib import Path
from typing import Any

from llm_locust.protocols.base import RequestSpec
from llm_locust.workload.audio import AudioMaker, audio_part
from llm_locust.workload.formats.reader import TraceError
from llm_locust.workload.images import ImageMaker, content_parts, file_data_url, parse_size
from llm_locust.workload.sessions import IdealCache
from llm_locust.workload.trace_record import TraceRecord

DEFAULT_MAX_TOKENS = 128


class SpecBuilder:
    def __init__(self, settings, prompts, chat: bool) -> None:
        """`prompts`: a PromptBuilder (llm_locust.workload.prompts); `chat`: the API takes messages."""
        self.settings = settings
        self.prompts = prompts
        self.chat = chat
        self.sends = 0  # --prefix-hit: the sends of this process, to give each its own blocks
        self.ideal = IdealCache()  # a trace's prefix blocks: what an unbounded cache would serve, per process
        s = settings
        self.n_images = int(getattr(s, "images", 0) or 0)
        self.image_size = parse_size(getattr(s, "image_size", "") or "512x512")
        self.image_format = getattr(s, "image_format", "png") or "png"
        self.images = ImageMaker(getattr(s, "seed", 0) or 0)
        self.n_audio = int(getattr(s, "audio", 0) or 0)
        self.audio_seconds = float(getattr(s, "audio_seconds", 2.0) or 2.0)
        self.audio = AudioMaker(getattr(s, "seed", 0) or 0) if self.n_audio else None
        # images, tools and response_format in OpenAI's chat form (vLLM, SGLang, llama-server, TGI)
        self.openai_chat = chat and (getattr(s, "api", "openai-chat") or "openai-chat") == "openai-chat"
        chat = self.openai_chat
        extra: dict[str, Any] = {}
        if chat and getattr(s, "tools", 0):
            extra["tools"] = tool_definitions(s.tools, getattr(s, "seed", 0) or 0)
            extra["tool_choice"] = getattr(s, "tool_choice", "auto") or "auto"
        schema_file = getattr(s, "response_format", "")
        if chat and schema_file:
            extra["response_format"] = response_format(s.response_format)
        self.extra_body = extra

    def max_tokens(self, entry: TraceRecord) -> int:
        s = self.settings
        n = s.max_tokens or entry.output_tokens or DEFAULT_MAX_TOKENS
        if s.max_tokens_cap:
            n = min(n, s.max_tokens_cap)
        return max(1, n)

    def is_overlong(self, entry: TraceRecord) -> bool:
        """The overlong mix (--overlong-share): whether `entry` gets a prompt past the context; by its
        source (the same record on any worker, in any loop), seeded."""
        share = getattr(self.settings, "overlong_share", 0.0) or 0.0
        if share <= 0 or not entry.source:
            return False
        h = zlib.crc32(f"{getattr(self.settings, 'seed', 0) or 0}:{entry.source}".encode())
        return h / 2**32 < share

    def _hash_ids(self, entry: TraceRecord) -> list | None:
        """The record's prefix blocks; with --prefix-hit, every block after the shared first one
        made this send's own: a record sent again (a closed loop goes round its trace) then finds
        only the shared prefix in the server's cache, and the hit ratio stays the one asked for."""
        ids = getattr(entry, "hash_ids", None)
        if not ids or not getattr(self.settings, "prefix_hit", 0):
            return ids
        self.sends += 1
        return [ids[0], *(f"{h}/{os.getpid()}/{self.sends}" for h in ids[1:])]

    def spec(self, entry: TraceRecord, model: str | None, history: list[dict[str, Any]] | None = None) -> RequestSpec:
        """The request for `entry`; `history`: earlier turns of its conversation (chat messages)."""
        prompt, messages = entry.prompt, entry.messages
        ideal = None
        overlong = self.is_overlong(entry)
        if overlong:  # a synthetic prompt of --overlong-tokens in its place, marked for the record
            built = self.prompts.build(int(self.settings.overlong_tokens) or 1, key=f"overlong:{entry.source}")
            prompt, messages, history = built.text, built.messages, None
        if prompt is None and messages is None:
            hash_ids, block_size = self._hash_ids(entry), getattr(entry, "block_size", None)
            built = self.prompts.build(
                entry.input_tokens or 1,
                hash_ids=hash_ids,
                block_size=block_size,
                key=entry.source or None,  # same record -> same text, on whichever worker sends it
            )
            prompt, messages = built.text, built.messages
            ideal = self._ideal(hash_ids, block_size, entry.input_tokens)
        if history:
            if messages is None:
                messages = [{"role": "user", "content": prompt or ""}]
            messages = history + messages
            prompt = None
        media = (0, 0, 0, 0)
        if self.openai_chat:
            messages, media = self._with_images(entry, prompt, messages)
            if self.n_audio:
                messages, media = self._with_audio(prompt, messages, media)
            if messages is not None:
                prompt = None
        s = self.settings
        return RequestSpec(
            model=model or None,
            prompt=prompt,
            messages=messages,
            max_tokens=self.max_tokens(entry),
            force_length=s.force_length,
            continuous_usage=s.continuous_usage,
            extra_body=dict(self.extra_body) if self.extra_body else {},
            ideal_cached=ideal,
            overlong=overlong,
            media=media if media[0] or media[2] else None,
        )

    def _ideal(self, hash_ids: list | None, block_size: int | None, tokens: int | None) -> int | None:
        """The prompt tokens an unbounded cache would serve this send, from its prefix blocks in
        the order this process sends them; None without blocks, or with --prefix-hit (its own
        check: the target against the server's counters)."""
        if getattr(self.settings, "prefix_hit", 0):
            return None
        if not hash_ids or not block_size or not tokens:
            return None
        return self.ideal.blocks(tuple(hash_ids), block_size, tokens)

    def _with_audio(self, prompt: str | None, messages: list[dict[str, Any]] | None, media: tuple[int, int, int, int]):
        """(messages, media): --audio N clips added to the last user message as input_audio parts."""
        assert self.audio is not None  # made whenever n_audio > 0, the only time this is called
        parts, nbytes = [], 0
        for i in range(self.n_audio):
            b64, size = self.audio.clip(self.audio_seconds, i)
            parts.append(audio_part(b64))
            nbytes += size
        if messages is None:
            messages = [{"role": "user", "content": [{"type": "text", "text": prompt or ""}] + parts}]
        else:
            messages = list(messages)
            last = dict(messages[-1])
            c = last.get("content")
            last["content"] = (list(c) if isinstance(c, list) else [{"type": "text", "text": c or ""}]) + parts
            messages[-1] = last
        return messages, (media[0], media[1], self.n_audio, nbytes)

    def _with_images(self, entry: TraceRecord, prompt: str | None, messages: list[dict[str, Any]] | None):
        """(messages, (images, image bytes)): the trace's file:// parts as data: URLs, and the
        synthetic images (--images N, else the record's count) added to the last user message."""
        n_img = n_bytes = 0
        if messages is not None and any(isinstance(m.get("content"), list) for m in messages):
            messages, n_img, n_bytes = _inline_files(messages, entry.source)
        want = self.n_images or (entry.images or 0)
        want -= n_img  # a trace's own image parts count towards its image count
        if want <= 0:
            return messages, (n_img, n_bytes, 0, 0)
        urls = []
        for i in range(want):
            url, size = self.images.data_url(self.image_size, self.image_format, i)
            urls.append(url)
            n_bytes += size
        if messages is None:
            messages = [{"role": "user", "content": content_parts(prompt or "", urls)}]
        else:
            messages = list(messages)
            last = dict(messages[-1])
            c = last.get("content")
            if isinstance(c, list):
                last["content"] = list(c) + content_parts("", urls)[1:]
            else:
                last["content"] = content_parts(c or "", urls)
            messages[-1] = last
        return messages, (n_img + want, n_bytes, 0, 0)


def _inline_files(messages: list[dict[str, Any]], source: str) -> tuple[list[dict[str, Any]], int, int]:
    """file:// image parts -> data: URLs (read once per file); (messages, images, bytes)."""
    out, n, nbytes = [], 0, 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            parts = []
            for p in c:
                if isinstance(p, dict) and p.get("type") == "image_url":
                    n += 1
                    url = (p.get("image_url") or {}).get("url") or ""
                    if url.startswith("file://"):
                        try:
                            url, size = file_data_url(url[7:])
                        except OSError as e:
                            raise TraceError(f"{source}: image {url[7:]!r} cannot be read: {e.strerror or e}") from None
                        nbytes += size
                        p = {"type": "image_url", "image_url": {"url": url}}
                parts.append(p)
            m = {**m, "content": parts}
        out.append(m)
    return out, n, nbytes


# ---- tools ----

_TOOL_WORDS = (
    "weather",
    "stock",
    "flight",
    "hotel",
    "order",
    "invoice",
    "ticket",
    "route",
    "user",
    "search",
    "calendar",
    "email",
    "file",
    "payment",
    "recipe",
    "movie",
    "news",
    "map",
)
_TOOL_VERBS = ("get", "find", "create", "update", "cancel", "list", "book", "check")
_PARAM_TYPES = ("string", "integer", "number", "boolean", "enum")


def tool_definitions(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """N OpenAI function tools with JSON-schema parameters, the same for the same (n, seed)."""
    rng = random.Random(f"llm-locust-tools/{seed}")
    tools = []
    for i in range(int(n)):
        verb, noun = rng.choice(_TOOL_VERBS), rng.choice(_TOOL_WORDS)
        props: dict[str, Any] = {}
        for j in range(rng.randint(1, 4)):
            kind = rng.choice(_PARAM_TYPES)
            pname = f"{rng.choice(_TOOL_WORDS)}_{j}"
            if kind == "enum":
                props[pname] = {
                    "type": "string",
                    "enum": rng.sample(_TOOL_WORDS, 3),
                    "description": f"which {pname.split('_')[0]}",
                }
            else:
                props[pname] = {"type": kind, "description": f"the {pname.split('_')[0]} {kind}"}
        required = sorted(rng.sample(sorted(props), rng.randint(1, len(props))))
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"{verb}_{noun}_{i}",
                    "description": f"{verb.capitalize()} a {noun} ({i}).",
                    "parameters": {"type": "object", "properties": props, "required": required},
                },
            }
        )
    return tools


# ---- structured output ----


def load_schema(path: str) -> dict[str, Any]:
    """The JSON schema in `path` (a JSON object); ValueError naming the file and the fault."""
    try:
        with open(path, "rb") as f:
            schema = json.loads(f.read())
    except OSError as e:
        raise ValueError(f"{path}: cannot read the schema: {e.strerror or e}") from None
    except ValueError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise ValueError(f"{path}: a JSON schema must be an object")
    return schema


def response_format(path: str) -> dict[str, Any]:
    """The OpenAI ``response_format`` for the schema file: json_schema, named by the file's stem
    (or the schema's own ``title``)."""
    schema = load_schema(path)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or Path(path).stem))[:64] or "schema"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def wants_text(spec: RequestSpec) -> bool:
    """The reply text must be kept for this request (its structured output is checked)."""
    return "response_format" in spec.extra_body


class StructuredCheck:
    """Does a reply parse as JSON and validate against the schema? jsonschema when installed,
    else a subset: type, enum, const, properties, required, additionalProperties, items,
    min/max(Length|Items|imum), pattern, anyOf/oneOf/allOf/not ($ref is not followed: it passes)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        try:
            import jsonschema

            cls = jsonschema.validators.validator_for(schema)
            self._validator = cls(schema)
        except Exception:  # not installed, or a schema it refuses: the subset
            self._validator = None

    @classmethod
    def from_file(cls, path: str) -> StructuredCheck:
        return cls(load_schema(path))

    def __call__(self, text: str) -> tuple[bool, bool]:
        """(parses as JSON, validates)."""
        try:
            value = json.loads(text)
        except (ValueError, TypeError):
            return False, False
        if self._validator is not None:
            return True, self._validator.is_valid(value)
        return True, _valid(value, self.schema)


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _valid(v: Any, s: Any) -> bool:  # noqa: C901 - one keyword per branch
    if s is True or s is None or s == {}:
        return True
    if s is False or not isinstance(s, dict):
        return False
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_TYPES.get(x, lambda _v: True)(v) for x in types):
            return False
    if "enum" in s and v not in s["enum"]:
        return False
    if "const" in s and v != s["const"]:
        return False
    if isinstance(v, dict):
        props = s.get("properties") or {}
        if any(k not in v for k in s.get("required") or ()):
            return False
        for k, x in v.items():
            if k in props:
                if not _valid(x, props[k]):
                    return False
            elif "additionalProperties" in s and not _valid(x, s["additionalProperties"]):
                return False
    if isinstance(v, list):
        if "items" in s and not all(_valid(x, s["items"]) for x in v):
            return False
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
            return False
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", len(v)):
            return False
        if "pattern" in s and not re.search(s["pattern"], v):
            return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s and v < s["minimum"] or "maximum" in s and v > s["maximum"]:
            return False
    if "allOf" in s and not all(_valid(v, x) for x in s["allOf"]):
        return False
    if "anyOf" in s and not any(_valid(v, x) for x in s["anyOf"]):
        return False
    if "oneOf" in s and sum(_valid(v, x) for x in s["oneOf"]) != 1:
        return False
    if "not" in s and _valid(v, s["not"]):
        return False
    return True

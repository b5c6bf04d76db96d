"""Why a request failed, read from the server's own words (pure; no I/O).

`cause_of(status, text)` names the cause of a failure when the server says it plainly, else None:

- ``overlong``: the request does not fit the model's context. Each server's wording, as its source
  writes it:

  - vLLM: "This model's maximum context length is {N} tokens. However, your request has {M} input
    tokens. ..." (OpenAIServing._create_tokens_prompt); "'max_tokens' or 'max_completion_tokens' is
    too large: {X}. This model's maximum context length is {N} tokens and your request has {M} input
    tokens ..."; its input processor, which token-id prompts reach: "The decoder prompt (length {M})
    is longer than the maximum model length of {N}."
  - llama.cpp (llama-server): "request ({M} tokens) exceeds the available context size ({N} tokens),
    try increasing it", type "exceed_context_size_error", HTTP 400 (tools/server/server-context.cpp,
    server-common.cpp format_error_response); for non-splittable tasks "input ({M} tokens) is larger
    than the max context size ({N} tokens). skipping".
  - TGI: "Input validation error: `inputs` tokens + `max_new_tokens` must be <= {N}. Given: {M}
    `inputs` tokens and {K} `max_new_tokens`" and "`inputs` must have less than {N} tokens. Given: {M}"
    (router/src/validation.rs, HTTP 422).
  - SGLang: "The input ({M} tokens) is longer than the model's context length ({N} tokens)." and
    "Requested token count exceeds the model's maximum context length of {N} tokens. ..."
    (srt/managers/tokenizer_manager.py, HTTP 400).

- ``oom``: the server ran out of memory: "CUDA out of memory", "out of memory", "OOM" in a reply
  that is not a 4xx (a 5xx, or an error event inside a 200 stream).
- ``overloaded``: HTTP 429 or 503, or the server says it is busy: TGI's "Model is overloaded" (429,
  router/src/infer/mod.rs), "server is busy", "too many requests", llama-server's 503 "Loading model".

Only these words decide; a failure they do not name keeps cause None.
"""

from __future__ import annotations

import re

OVERLONG = "overlong"
OVERLOADED = "overloaded"
OOM = "oom"
CAUSES: tuple[str, ...] = (OVERLONG, OVERLOADED, OOM)

# Lower-cased fragments; each one a server's own wording (see the module docstring).
OVERLONG_PHRASES: tuple[str, ...] = (
    "maximum context length",  # vLLM, SGLang (and OpenAI's own wording)
    "longer than the maximum model length",  # vLLM input processor
    "exceeds the available context size",  # llama.cpp
    "exceed_context_size_error",  # llama.cpp error type
    "larger than the max context size",  # llama.cpp, non-splittable tasks
    "is longer than the model's context length",  # SGLang
    "tokens + `max_new_tokens` must be <=",  # TGI
    "`inputs` must have less than",  # TGI
    "context_length_exceeded",  # OpenAI-compatible gateways
)
OVERLOADED_PHRASES: tuple[str, ...] = (
    "model is overloaded",  # TGI 429
    "server is busy",
    "too many requests",
    "server overloaded",
    "service unavailable",
)
OVERLOADED_STATUSES = frozenset({429, 503})
_OOM_WORD = re.compile(r"\bOOM\b")  # the bare abbreviation only in capitals ("oom" is a word elsewhere)


def cause_of(status: int | None, text: str | None) -> str | None:
    """The cause of a failure from its HTTP status and the server's text; None when unsaid."""
    low = (text or "").lower()
    if low and any(p in low for p in OVERLONG_PHRASES):
        return OVERLONG
    client_error = status is not None and 400 <= status < 500 and status not in OVERLOADED_STATUSES
    if low and not client_error and _is_oom(text or ""):
        return OOM
    if status in OVERLOADED_STATUSES or (low and any(p in low for p in OVERLOADED_PHRASES)):
        return OVERLOADED
    return None


def _is_oom(text: str) -> bool:
    low = text.lower()
    return "out of memory" in low or "outofmemory" in low or "out_of_memory" in low or bool(_OOM_WORD.search(text))


_HTTP_PREFIX = re.compile(r"^(HTTP \d{3}: )")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def normalise(text: str | None) -> str:
    """The text with every number written N (an "HTTP 400: " prefix kept), so that messages which
    differ only in token counts, sizes or ids read the same: one row in Locust's failure table."""
    if not text:
        return ""
    m = _HTTP_PREFIX.match(text)
    head = m.group(1) if m else ""
    return head + _NUMBER.sub("N", text[len(head) :])

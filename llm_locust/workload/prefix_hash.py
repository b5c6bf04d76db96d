"""Prefix-block hashing shared by `trace record` and `trace anonymize`.

A prompt is turned into text (`request_text`), split into blocks, and each block is hashed
CHAINED with the previous block's digest, so two requests share block id k exactly when their
whole prompts agree up to the end of block k (Mooncake's `hash_ids` semantics). Digests are
mapped to small sequential ints per trace file: the first digest seen gets 0, the next new one 1...

Blocks are `block_size` tokens when a tokenizer is given (`tokenizer.json` of a Hugging Face
tokenizer, or a directory holding one; needs the `tokenizers` package), else
`block_size * CHARS_PER_TOKEN` characters (2,048 characters for the default 512-token block).
The last, partial block counts too, so `len(hash_ids) == ceil(tokens / block_size)` with a
tokenizer (as in Mooncake traces) and `ceil(chars / (block_size * 4))` without.
Prompts sent as token ids are blocked by ids in both modes.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable
from typing import Any

DEFAULT_BLOCK_SIZE = 512  # tokens per block, as in Mooncake traces
CHARS_PER_TOKEN = 4  # the character estimate of a token, for blocks and counts without a tokenizer

CHAT = "openai-chat"
COMPLETIONS = "openai-completions"


class TokenizerError(RuntimeError):
    """A --tokenizer that cannot be loaded."""


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        if isinstance(part.get("text"), str):
            return part["text"]
        return f"<{part.get('type', 'part')}>"  # images, audio...: a placeholder, not their bytes
    return ""


def content_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(p) for p in content)
    return str(content)


def render_messages(messages: list) -> str:
    """Chat messages as `role: content` lines joined with newlines (what gets hashed and counted)."""
    lines = []
    for m in messages:
        if isinstance(m, dict):
            lines.append(f"{m.get('role', '')}: {content_text(m.get('content'))}")
        else:
            lines.append(str(m))
    return "\n".join(lines)


def request_text(api: str, prompt: Any = None, messages: Any = None) -> str | list[int] | None:
    """The prompt as hashed: rendered messages for chat, the prompt for completions.

    A completions prompt of token ids stays a list of ints; a list of prompts is joined with
    newlines. None when the request carries no usable prompt.
    """
    if api == CHAT:
        if isinstance(messages, list):
            return render_messages(messages)
        return None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return prompt
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        if all(isinstance(p, list) for p in prompt):  # a batch of token-id prompts: flatten
            return [t for p in prompt for t in p if isinstance(t, int)]
    return None


def load_tokenizer(path: str):
    """A `tokenizers.Tokenizer` from a tokenizer.json file or a directory holding one."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise TokenizerError(f"{path}: no such tokenizer file (give a tokenizer.json or a directory with one)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError("--tokenizer needs the 'tokenizers' package: pip install tokenizers") from None
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the library raises plain Exception for bad files
        raise TokenizerError(f"{path}: cannot load tokenizer: {e}") from None


def _chain(blocks: Iterable[bytes]) -> list[bytes]:
    out, prev = [], b""
    for b in blocks:
        prev = hashlib.blake2b(prev + b, digest_size=16).digest()
        out.append(prev)
    return out


def _ids_bytes(ids: list[int]) -> bytes:
    return struct.pack(f"<{len(ids)}q", *ids)


class PrefixHasher:
    """Chained block digests of prompts, and their sequential ids within one trace file.

    `digests()` is pure (safe in a worker thread); `intern()` assigns ids and must be called in
    the order lines are written, which is what makes the recorder and the anonymizer agree.
    """

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, tokenizer: Any = None):
        if block_size < 1:
            raise ValueError("block size must be >= 1")
        self.block_size = block_size
        self.block_chars = block_size * CHARS_PER_TOKEN
        self.tokenizer = tokenizer
        self._ids: dict[bytes, int] = {}

    def digests(self, text: str | list[int]) -> tuple[list[bytes], int, bool]:
        """(chained block digests, token count, whether the count is a character estimate)."""
        b = self.block_size
        if isinstance(text, list):  # token ids
            return _chain(b"i" + _ids_bytes(text[i : i + b]) for i in range(0, len(text), b)), len(text), False
        if self.tokenizer is not None:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            return _chain(b"t" + _ids_bytes(ids[i : i + b]) for i in range(0, len(ids), b)), len(ids), False
        c = self.block_chars
        digests = _chain(b"c" + text[i : i + c].encode("utf-8", "surrogatepass") for i in range(0, len(text), c))
        return digests, estimate_tokens(text), True

    def intern(self, digests: list[bytes]) -> list[int]:
        ids = self._ids
        out = []
        for d in digests:
            i = ids.get(d)
            if i is None:
                i = ids[d] = len(ids)
            out.append(i)
        return out

    def hash_ids(self, text: str | list[int]) -> tuple[list[int], int, bool]:
        d, n, est = self.digests(text)
        return self.intern(d), n, est

    @property
    def distinct_blocks(self) -> int:
        return len(self._ids)


def estimate_tokens(text: str) -> int:
    """Token estimate without a tokenizer: one per CHARS_PER_TOKEN characters, at least 1."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


class Pseudonyms:
    """Conversation ids replaced by `conv-1`, `conv-2`... in first-seen order (never the raw value)."""

    def __init__(self) -> None:
        self._map: dict[str, str] = {}

    def get(self, raw: str) -> str:
        p = self._map.get(raw)
        if p is None:
            p = self._map[raw] = f"conv-{len(self._map) + 1}"
        return p

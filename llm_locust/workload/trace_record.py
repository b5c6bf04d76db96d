from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class TraceRecord:
    """One request of a workload: when to send it and what it asks for.

    Built on demand by `Trace[i]`; the trace itself stores its columns compactly (see trace.py).
    Every field but `arrival` is optional: a field is None when the trace format does not carry it.
    """

    arrival: float  # seconds from trace start
    input_tokens: int | None = None
    output_tokens: int | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    conversation_id: str | None = None
    turn: int | None = None  # 1-based position of this request in its conversation
    hash_ids: tuple[int, ...] | None = None  # prefix-block ids, block i covers tokens [i*bs, (i+1)*bs)
    block_size: int | None = None  # tokens per hash block for this trace
    images: int | None = None  # Azure 2025 NumImages
    model: str | None = None  # BurstGPT's Model column, our JSONL's `model`
    source: str = ""  # "file:line", for error messages and the report

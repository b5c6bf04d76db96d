from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class TraceRecord:
    """One request of a workload: when to send it and what it asks for."""

    arrival: float  # seconds from trace start
    input_tokens: int | None = None
    output_tokens: int | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    conversation_id: str | None = None
    turn: int | None = None
    source: str = ""  # "file:line", for error messages and the report

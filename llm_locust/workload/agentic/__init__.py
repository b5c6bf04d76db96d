"""Session traces: the agentic and multi-turn formats read into `workload.sessions.SessionTrace`.

    SESSION_FORMATS                                   names --trace-format takes for them
    detect_sessions(path) -> str | None              the session format of a file, or None
    load_sessions(path, fmt=None, *, share=None)     -> SessionTrace (TraceError names file:line)
"""

from __future__ import annotations

from pathlib import Path

from llm_locust.workload.formats.base import TraceError
from llm_locust.workload.sessions import SessionTrace

SESSION_FORMATS: tuple[str, ...] = ()


def detect_sessions(path: str | Path) -> str | None:
    return None


def load_sessions(path: str | Path, fmt: str | None = None, *, share: tuple[int, int] | None = None) -> SessionTrace:
    raise TraceError(f"{path}: not a session trace")

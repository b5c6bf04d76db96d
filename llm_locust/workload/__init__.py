"""Workloads: what to send. `TraceRecord` is the normalised unit every loader produces."""

from .records import TraceRecord
from .load import TraceError, load_trace
from .prompts import PromptSynth

__all__ = ["TraceRecord", "TraceError", "load_trace", "PromptSynth"]

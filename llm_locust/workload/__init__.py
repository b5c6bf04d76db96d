"""Workloads: what to send. `TraceRecord` is the normalised unit every loader produces; `Trace`
holds a loaded trace compactly and builds records on demand."""

from .records import TraceRecord
from .load import FORMATS, TraceError, load_trace
from .trace import Trace
from .prompts import PromptSynth

__all__ = ["TraceRecord", "Trace", "TraceError", "load_trace", "FORMATS", "PromptSynth"]

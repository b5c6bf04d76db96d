"""Workloads: what to send. `TraceRecord` is the normalised unit every loader produces; `Trace`
holds a loaded trace compactly and builds records on demand."""

from llm_locust.workload.load import FORMATS, TraceError, load_trace
from llm_locust.workload.prompts import PromptSynth
from llm_locust.workload.trace import Trace
from llm_locust.workload.trace_record import TraceRecord

__all__ = ["TraceRecord", "Trace", "TraceError", "load_trace", "FORMATS", "PromptSynth"]

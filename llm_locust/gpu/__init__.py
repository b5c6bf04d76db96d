"""GPU sidecar: NVML sampling in a native thread, exported in Prometheus format.

Run it as its own process beside the inference server (``llm-locust gpu-sidecar`` or
``python -m llm_locust.gpu.sidecar``); see docs/gpu-sidecar.md.
"""

from llm_locust.gpu.nvml import (
    Backend,
    BackendUnavailable,
    DeviceInfo,
    DeviceLost,
    FakeBackend,
    NvmlBackend,
    ProcessInfo,
)

__all__ = [
    "Backend",
    "BackendUnavailable",
    "DeviceInfo",
    "DeviceLost",
    "FakeBackend",
    "NvmlBackend",
    "ProcessInfo",
]

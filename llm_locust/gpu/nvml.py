"""Reading GPUs: a small ``Backend`` interface, the real NVML one and a fake one.

Figures are returned in base units under these keys (a key is absent when the device does not
support it, never a fake 0):

    memory_total_bytes, memory_used_bytes, memory_free_bytes, memory_reserved_bytes,
    gpu_util_ratio, mem_util_ratio, power_watts, energy_joules (counter),
    sm_clock_hz, temperature_celsius, throttle_reasons (NVML bitmask)

Errors: the whole library missing -> ``BackendUnavailable`` from ``start``; a device lost
(``GpuIsLost``/``Unknown``) -> ``DeviceLost`` from ``sample``; ``NotSupported`` for a figure ->
that figure is left out (and not asked again). NVMLError objects are unhashable, so only their
class names are ever kept in sets.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("llm_locust.gpu")

MiB = 1024 * 1024

FIGURES = (
    "memory_total_bytes",
    "memory_used_bytes",
    "memory_free_bytes",
    "memory_reserved_bytes",
    "gpu_util_ratio",
    "mem_util_ratio",
    "power_watts",
    "energy_joules",
    "sm_clock_hz",
    "temperature_celsius",
    "throttle_reasons",
)

# NVML clocks event ("throttle") reason bits -> our label value.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class BackendUnavailable(Exception):
    """No NVML library, no driver, or no permission: nothing can be read at all."""


class DeviceLost(Exception):
    """The device stopped answering (GpuIsLost / Unknown)."""


@dataclass
class DeviceInfo:
    key: str  # stable id within the process: "0", "0/mig1"
    gpu: str  # index of the physical GPU
    uuid: str
    name: str
    pci_bus_id: str
    device: str  # "nvidia0"
    gpu_instance_id: str = ""  # MIG GPU instance id, "" for a whole GPU


@dataclass
class ProcessInfo:
    pid: int
    name: str
    used_bytes: int | None


class Backend:
    """Interface. ``start`` once, then ``sample``/``processes`` from one thread."""

    def start(self) -> None:  # raises BackendUnavailable
        raise NotImplementedError

    def devices(self) -> list[DeviceInfo]:
        raise NotImplementedError

    def system_info(self) -> dict[str, str]:
        """driver_version, cuda_version (strings, "" when unknown)."""
        raise NotImplementedError

    def sample(self, dev: DeviceInfo) -> dict[str, float]:  # raises DeviceLost
        raise NotImplementedError

    def processes(self, dev: DeviceInfo) -> list[ProcessInfo]:  # raises DeviceLost
        raise NotImplementedError

    def shutdown(self) -> None:
        pass


def _s(v) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


class NvmlBackend(Backend):
    """Real NVML through ``pynvml`` (package nvidia-ml-py): nvmlInit once, handles cached."""

    def __init__(self, nvml=None):
        self._n = nvml
        self._handles: dict[str, object] = {}
        self._devices: list[DeviceInfo] = []
        self._sys: dict[str, str] = {"driver_version": "", "cuda_version": ""}
        self._unsupported: dict[str, set[str]] = {}  # device key -> figure names
        self._warned: set[tuple[str, str, str]] = set()  # (key, figure, error class name)
        self._mem_v1 = False
        self._temp_v1 = False
        self._started = False

    # -- setup -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._n is None:
            try:
                import pynvml
            except ImportError as e:  # pragma: no cover - dependency is declared
                raise BackendUnavailable(f"nvidia-ml-py (pynvml) is not installed: {e}") from e
            self._n = pynvml
        n = self._n
        try:
            n.nvmlInit()
        except n.NVMLError as e:
            raise BackendUnavailable(f"NVML unavailable ({type(e).__name__}: {e})") from None
        except OSError as e:
            raise BackendUnavailable(f"NVML unavailable ({e})") from None
        self._started = True
        try:
            count = n.nvmlDeviceGetCount()
        except n.NVMLError as e:
            raise BackendUnavailable(f"NVML cannot count devices ({type(e).__name__}: {e})") from None
        self._sys["driver_version"] = self._try(lambda: _s(n.nvmlSystemGetDriverVersion()), "")
        cuda = self._try(lambda: int(n.nvmlSystemGetCudaDriverVersion_v2()), None)
        if cuda:
            self._sys["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        for i in range(count):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
            except n.NVMLError as e:
                log.error("GPU %d: cannot get a handle (%s: %s); leaving it out", i, type(e).__name__, e)
                continue
            minor = self._try(lambda h=h: int(n.nvmlDeviceGetMinorNumber(h)), i)
            info = DeviceInfo(
                key=str(i),
                gpu=str(i),
                uuid=self._try(lambda h=h: _s(n.nvmlDeviceGetUUID(h)), ""),
                name=self._try(lambda h=h: _s(n.nvmlDeviceGetName(h)), ""),
                pci_bus_id=self._try(lambda h=h: _s(n.nvmlDeviceGetPciInfo(h).busId), ""),
                device=f"nvidia{minor}",
            )
            self._devices.append(info)
            self._handles[info.key] = h
            self._add_mig(info, h)

    def _add_mig(self, parent: DeviceInfo, h) -> None:
        n = self._n
        mode = self._try(lambda: n.nvmlDeviceGetMigMode(h), None)
        if not mode or mode[0] != getattr(n, "NVML_DEVICE_MIG_ENABLE", 1):
            return
        count = self._try(lambda: int(n.nvmlDeviceGetMaxMigDeviceCount(h)), 0)
        for j in range(count):
            try:
                mh = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except n.NVMLError:
                continue  # slot not populated
            gi = self._try(lambda mh=mh: str(n.nvmlDeviceGetGpuInstanceId(mh)), str(j))
            info = DeviceInfo(
                key=f"{parent.key}/mig{j}",
                gpu=parent.gpu,
                uuid=self._try(lambda mh=mh: _s(n.nvmlDeviceGetUUID(mh)), ""),
                name=parent.name,
                pci_bus_id=parent.pci_bus_id,
                device=parent.device,
                gpu_instance_id=gi,
            )
            self._devices.append(info)
            self._handles[info.key] = mh

    def _try(self, fn, default):
        try:
            return fn()
        except self._n.NVMLError:
            return default

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def system_info(self) -> dict[str, str]:
        return dict(self._sys)

    def shutdown(self) -> None:
        if self._started:
            self._started = False
            self._try(self._n.nvmlShutdown, None)

    # -- sampling ----------------------------------------------------------------------------
    def _call(self, dev: DeviceInfo, figure: str, fn):
        """Run one NVML read; None when unsupported or failing; DeviceLost when the GPU is gone."""
        n = self._n
        unsupported = self._unsupported.setdefault(dev.key, set())
        if figure in unsupported:
            return None
        try:
            return fn()
        except n.NVMLError_NotSupported:
            unsupported.add(figure)
            log.info("GPU %s: %s not supported; that series is left out", dev.key, figure)
            return None
        except (n.NVMLError_GpuIsLost, n.NVMLError_Unknown) as e:
            raise DeviceLost(f"{type(e).__name__}: {e}") from None
        except n.NVMLError as e:
            k = (dev.key, figure, type(e).__name__)
            if k not in self._warned:
                self._warned.add(k)
                log.warning("GPU %s: reading %s failed (%s: %s); left out", dev.key, figure, k[2], e)
            return None

    def _memory(self, h):
        n = self._n
        if not self._mem_v1:
            try:
                return n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
            except n.NVMLError_FunctionNotFound:
                log.info("NVML has no v2 memory info (old driver); using v1 (no reserved figure)")
                self._mem_v1 = True
        return n.nvmlDeviceGetMemoryInfo(h)

    def _temperature(self, h):
        n = self._n
        if not self._temp_v1:
            try:
                t = n.nvmlDeviceGetTemperatureV(h, n.NVML_TEMPERATURE_GPU)
                return getattr(t, "temperature", t)
            except (n.NVMLError_FunctionNotFound, AttributeError):
                self._temp_v1 = True
        return n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)

    def _throttle(self, h):
        n = self._n
        fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        return fn(h)

    def sample(self, dev: DeviceInfo) -> dict[str, float]:
        n = self._n
        h = self._handles[dev.key]
        out: dict[str, float] = {}
        mem = self._call(dev, "memory", lambda: self._memory(h))
        if mem is not None:
            out["memory_total_bytes"] = float(mem.total)
            out["memory_used_bytes"] = float(mem.used)
            out["memory_free_bytes"] = float(mem.free)
            reserved = getattr(mem, "reserved", None)
            if reserved is not None and not self._mem_v1:
                out["memory_reserved_bytes"] = float(reserved)
        util = self._call(dev, "utilization", lambda: n.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            out["gpu_util_ratio"] = util.gpu / 100.0
            out["mem_util_ratio"] = util.memory / 100.0
        v = self._call(dev, "power", lambda: n.nvmlDeviceGetPowerUsage(h))
        if v is not None:
            out["power_watts"] = v / 1000.0
        v = self._call(dev, "energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
        if v is not None:
            out["energy_joules"] = v / 1000.0
        v = self._call(dev, "sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        if v is not None:
            out["sm_clock_hz"] = v * 1e6
        v = self._call(dev, "temperature", lambda: self._temperature(h))
        if v is not None:
            out["temperature_celsius"] = float(v)
        v = self._call(dev, "throttle", lambda: self._throttle(h))
        if v is not None:
            out["throttle_reasons"] = float(v)
        return out

    def processes(self, dev: DeviceInfo) -> list[ProcessInfo]:
        n = self._n
        h = self._handles[dev.key]
        procs = self._call(dev, "processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(h))
        out = []
        for p in procs or ():
            name = self._try(lambda p=p: _s(n.nvmlSystemGetProcessName(p.pid)), "")
            if not name:
                try:
                    with open(f"/proc/{p.pid}/comm") as f:
                        name = f.read().strip()
                except OSError:
                    name = ""
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessInfo(int(p.pid), name.rsplit("/", 1)[-1], int(used) if used is not None else None))
        return out


@dataclass
class FakeBackend(Backend):
    """``n`` H200-like GPUs whose figures follow a synthetic load curve (for demos and tests).

    141 GB (143771 MiB) of memory, 700 W power limit, 1980 MHz max SM clock. Each GPU's load is a
    slow sine with a short burst every ``period`` seconds, phase-shifted per GPU.
    """

    n: int = 1
    period: float = 60.0
    clock: Callable[[], float] = time.monotonic
    lost: set = field(default_factory=set)  # device keys that raise DeviceLost
    _t0: float = 0.0
    _energy: dict = field(default_factory=dict)
    _last: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    TOTAL = 143771 * MiB
    RESERVED = 512 * MiB

    def start(self) -> None:
        self._t0 = self.clock()

    def devices(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                key=str(i),
                gpu=str(i),
                uuid=f"GPU-fa4e0000-0000-4000-8000-{i:012x}",
                name="NVIDIA H200 (fake)",
                pci_bus_id=f"00000000:{0x18 + i * 0x10:02X}:00.0",
                device=f"nvidia{i}",
            )
            for i in range(self.n)
        ]

    def system_info(self) -> dict[str, str]:
        return {"driver_version": "550.54.15-fake", "cuda_version": "12.4"}

    def load(self, i: int, t: float) -> float:
        x = (t / self.period + i / max(self.n, 1)) % 1.0
        base = 0.5 + 0.4 * math.sin(2 * math.pi * x)
        burst = 0.1 if x < 0.05 else 0.0
        return max(0.0, min(1.0, base + burst))

    def sample(self, dev: DeviceInfo) -> dict[str, float]:
        if dev.key in self.lost:
            raise DeviceLost("NVMLError_GpuIsLost: GPU is lost (fake)")
        i = int(dev.gpu)
        now = self.clock()
        t = now - self._t0
        ld = self.load(i, t)
        power = 90.0 + 610.0 * ld
        with self._lock:
            last = self._last.get(i)
            e = self._energy.get(i, 1.0e6 * (i + 1))
            if last is not None:
                e += power * max(0.0, now - last)
            self._energy[i] = e
            self._last[i] = now
        # A serving framework pre-allocates most memory; the rest moves a little with load.
        used = int(0.9 * self.TOTAL + 0.05 * self.TOTAL * ld)
        return {
            "memory_total_bytes": float(self.TOTAL),
            "memory_reserved_bytes": float(self.RESERVED),
            "memory_used_bytes": float(used),
            "memory_free_bytes": float(self.TOTAL - self.RESERVED - used),
            "gpu_util_ratio": round(ld, 2),
            "mem_util_ratio": round(0.6 * ld, 2),
            "power_watts": round(power, 3),
            "energy_joules": round(e, 3),
            "sm_clock_hz": (1980 if ld > 0.05 else 345) * 1e6,
            "temperature_celsius": float(round(32 + 45 * ld)),
            "throttle_reasons": float(0x4 if ld > 0.95 else (0x1 if ld <= 0.05 else 0)),
        }

    def processes(self, dev: DeviceInfo) -> list[ProcessInfo]:
        if dev.key in self.lost:
            raise DeviceLost("NVMLError_GpuIsLost: GPU is lost (fake)")
        return [ProcessInfo(pid=4242 + int(dev.gpu), name="python3", used_bytes=int(0.9 * self.TOTAL))]

"""``llm-locust gpu-sidecar``: sample NVML in a native thread, serve Prometheus metrics.

Cheap figures are read every ``--interval`` seconds (default 0.1 s = 10 Hz), process lists every
``--process-interval`` seconds (they take a driver lock, ~4.5 ms a call). Each scrape reports the
latest value plus the max and average over the samples taken since the previous scrape, so short
peaks survive a 5-15 s scrape interval (one scraper per sidecar: a second one would split windows).

Exposes dcgm-exporter names (``DCGM_FI_DEV_*``, labels gpu, UUID, device, modelName, pci_bus_id)
for existing dashboards, and base-unit names of our own (``llm_locust_gpu_*``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
import time

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from llm_locust.gpu.nvml import (
    THROTTLE_REASONS,
    Backend,
    BackendUnavailable,
    DeviceInfo,
    DeviceLost,
    FakeBackend,
    MiB,
    NvmlBackend,
    ProcessInfo,
)

log = logging.getLogger("llm_locust.gpu")

WINDOWED = (
    "memory_used_bytes",
    "memory_free_bytes",
    "gpu_util_ratio",
    "mem_util_ratio",
    "power_watts",
    "sm_clock_hz",
    "temperature_celsius",
)

# figure -> (dcgm name, help, factor to dcgm units, integer?)
DCGM = {
    "gpu_util_ratio": ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", 100.0),
    "mem_util_ratio": ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", 100.0),
    "memory_used_bytes": ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", 1.0 / MiB),
    "memory_free_bytes": ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", 1.0 / MiB),
    "memory_reserved_bytes": ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", 1.0 / MiB),
    "power_watts": ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", 1.0),
    # dcgm-exporter types this one a counter; it is exposed as a gauge here because the name
    # lacks "_total" (promtool rejects such counters). PromQL rate()/increase() work the same.
    "energy_joules": (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        1000.0,
    ),
    "sm_clock_hz": ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", 1e-6),
    "temperature_celsius": ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", 1.0),
    "throttle_reasons": ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask).", 1.0),
}

# figure -> (own name, help)
OWN = {
    "memory_total_bytes": ("llm_locust_gpu_memory_total_bytes", "GPU memory total."),
    "memory_used_bytes": ("llm_locust_gpu_memory_used_bytes", "GPU memory used."),
    "memory_free_bytes": ("llm_locust_gpu_memory_free_bytes", "GPU memory free."),
    "memory_reserved_bytes": ("llm_locust_gpu_memory_reserved_bytes", "GPU memory reserved by the driver."),
    "gpu_util_ratio": ("llm_locust_gpu_utilization_ratio", "Fraction of time a kernel was running (0-1)."),
    "mem_util_ratio": ("llm_locust_gpu_memory_utilization_ratio", "Fraction of time memory was read or written (0-1)."),
    "power_watts": ("llm_locust_gpu_power_watts", "GPU power draw."),
    "sm_clock_hz": ("llm_locust_gpu_sm_clock_hertz", "SM clock frequency."),
    "temperature_celsius": ("llm_locust_gpu_temperature_celsius", "GPU temperature."),
}

DCGM_LABELS = ["gpu", "UUID", "device", "modelName", "pci_bus_id", "GPU_I_ID"]
OWN_LABELS = ["gpu", "uuid", "device", "model_name", "pci_bus_id", "gpu_instance_id"]


def _labels(d: DeviceInfo) -> list[str]:
    return [d.gpu, d.uuid, d.device, d.name, d.pci_bus_id, d.gpu_instance_id]


def _original(module: str, name: str):
    """The unpatched `module.name` when gevent has monkey-patched it, else the module's own."""
    try:
        from gevent import monkey
    except ImportError:
        return getattr(importlib.import_module(module), name)
    return monkey.get_original(module, name)  # the saved original if patched, else the current one


class _Flag:
    """A stop flag between OS threads built on a raw lock: under gevent patching, threading's
    Event (and its Condition) would be gevent objects that an OS thread cannot wait on."""

    def __init__(self) -> None:
        self._lock = _original("_thread", "allocate_lock")()
        self._lock.acquire()  # held: not set

    def set(self) -> None:
        if not self.is_set():
            self._lock.release()

    def is_set(self) -> bool:
        if self._lock.acquire(False):
            self._lock.release()
            return True
        return False

    def wait(self, timeout: float) -> bool:
        if self._lock.acquire(True, max(timeout, 0.0)):
            self._lock.release()
            return True
        return False


class _NativeThread:
    """An OS thread that stays one under gevent monkey-patching (the sampler must never block
    a Locust process's event loop, and must never become a greenlet)."""

    def __init__(self, target, name: str = "", daemon: bool = True) -> None:
        self._target = target
        self.name = name
        self._done = _Flag()

    def start(self) -> None:
        def run() -> None:
            try:
                self._target()
            finally:
                self._done.set()

        _original("_thread", "start_new_thread")(run, ())

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(3600.0 if timeout is None else timeout)

    def is_alive(self) -> bool:
        return not self._done.is_set()


def native_thread_class() -> type[_NativeThread]:
    return _NativeThread


class _Stat:
    __slots__ = ("last", "wmax", "wsum", "wn")

    def __init__(self) -> None:
        self.last: float | None = None
        self.wmax: float | None = None
        self.wsum = 0.0
        self.wn = 0

    def add(self, v: float) -> None:
        self.last = v
        self.wmax = v if self.wmax is None or v > self.wmax else self.wmax
        self.wsum += v
        self.wn += 1


class Sampler:
    """Reads the backend from its own native thread; ``scrape()`` hands out a window snapshot."""

    def __init__(self, backend: Backend, interval: float = 0.1, process_interval: float = 5.0):
        self.backend = backend
        self.interval = interval
        self.process_interval = process_interval
        self.up = False
        self.devices: list[DeviceInfo] = []
        self.system: dict[str, str] = {}
        self.healthy: dict[str, bool] = {}
        self.stats: dict[str, dict[str, _Stat]] = {}
        self.procs: dict[str, list[ProcessInfo]] = {}
        self.samples = 0
        self._lock = _original("_thread", "allocate_lock")()
        self._stop = _Flag()
        self._thread: _NativeThread | None = None
        self._next_proc = 0.0
        self._retry_at: dict[str, float] = {}

    def open(self) -> bool:
        try:
            self.backend.start()
        except BackendUnavailable as e:
            log.error("gpu-sidecar: %s; serving llm_locust_gpu_up 0 and no GPU series", e)
            self.up = False
            return False
        self.devices = self.backend.devices()
        self.system = self.backend.system_info()
        for d in self.devices:
            self.healthy[d.key] = True
            self.stats[d.key] = {}
        self.up = True
        return True

    def start(self) -> None:
        if self.open():
            self.sample_once()
            self._thread = native_thread_class()(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.backend.shutdown()

    def _run(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            nxt += self.interval
            delay = nxt - time.monotonic()
            if delay < 0:  # fell behind: do not burst to catch up
                nxt = time.monotonic()
                delay = 0
            if self._stop.wait(delay):
                break
            try:
                self.sample_once()
            except Exception:  # never let the sampler die silently
                log.exception("gpu-sidecar: sampling failed")

    def sample_once(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        do_procs = now >= self._next_proc
        if do_procs:
            self._next_proc = now + self.process_interval
        for d in self.devices:
            if not self.healthy[d.key] and now < self._retry_at.get(d.key, 0.0):
                continue  # lost: retry only every process_interval
            try:
                vals = self.backend.sample(d)
                procs = self.backend.processes(d) if do_procs else None
            except DeviceLost as e:
                self._mark(d, False, str(e), now)
                continue
            with self._lock:
                st = self.stats[d.key]
                for k in list(st):
                    if k not in vals:  # stopped being readable: drop, never a stale value
                        del st[k]
                for k, v in vals.items():
                    st.setdefault(k, _Stat()).add(v)
                if procs is not None:
                    self.procs[d.key] = procs
            if not self.healthy[d.key]:
                self._mark(d, True, "", now)
        self.samples += 1

    def _mark(self, d: DeviceInfo, ok: bool, why: str, now: float) -> None:
        with self._lock:
            was = self.healthy[d.key]
            self.healthy[d.key] = ok
            if not ok:
                self._retry_at[d.key] = now + self.process_interval
                self.stats[d.key] = {}
                self.procs.pop(d.key, None)
        if was and not ok:
            log.error("gpu-sidecar: GPU %s (%s) lost: %s; health 0, other GPUs go on", d.key, d.uuid, why)
        elif ok and not was:
            log.warning("gpu-sidecar: GPU %s (%s) answers again; health 1", d.key, d.uuid)

    def scrape(self) -> dict:
        """Snapshot for one scrape; resets the max/avg windows."""
        with self._lock:
            figs = {}
            for key, st in self.stats.items():
                out: dict[str, tuple[float | None, float | None, float | None]] = {}
                for k, s in st.items():
                    if s.wn:
                        out[k] = (s.last, s.wmax, s.wsum / s.wn)
                    else:
                        out[k] = (s.last, s.last, s.last)
                    s.wmax, s.wsum, s.wn = None, 0.0, 0
                figs[key] = out
            return {
                "up": self.up,
                "devices": list(self.devices),
                "system": dict(self.system),
                "healthy": dict(self.healthy),
                "figures": figs,
                "procs": {k: list(v) for k, v in self.procs.items()},
            }


class GpuCollector:
    """prometheus_client custom collector over a Sampler."""

    def __init__(self, sampler: Sampler, dcgm: bool = True):
        self.sampler = sampler
        self.dcgm = dcgm

    def describe(self):
        return []  # names depend on what the devices support; do not pre-register

    def collect(self):
        snap = self.sampler.scrape()
        up = GaugeMetricFamily("llm_locust_gpu_up", "1 when NVML (or the fake backend) answers, 0 when unavailable.")
        up.add_metric([], 1.0 if snap["up"] else 0.0)
        yield up
        if not snap["up"]:
            return
        yield from _info_families(snap)
        if self.dcgm:
            yield from _dcgm_families(snap)
        yield from _own_families(snap)
        yield from _energy_families(snap)
        yield from _throttle_families(snap)
        yield from _process_families(snap)


def _each(snap: dict, fig: str):
    """(device, (last, max, avg)) for each device that has figure `fig` in this scrape."""
    figs = snap["figures"]
    for d in snap["devices"]:
        v = figs.get(d.key, {}).get(fig)
        if v is not None:
            yield d, v


def _info_families(snap: dict):
    """The static info and the health families (one series per device, lost ones included)."""
    info = InfoMetricFamily(
        "llm_locust_gpu", "Static GPU information.", labels=OWN_LABELS + ["driver_version", "cuda_version"]
    )
    health = GaugeMetricFamily("llm_locust_gpu_health", "1 while the GPU answers, 0 once lost.", labels=OWN_LABELS)
    for d in snap["devices"]:
        info.add_metric(
            _labels(d) + [snap["system"].get("driver_version", ""), snap["system"].get("cuda_version", "")], {}
        )
        health.add_metric(_labels(d), 1.0 if snap["healthy"].get(d.key) else 0.0)
    yield info
    yield health


def _dcgm_families(snap: dict):
    """The dcgm-exporter names, in dcgm units, for existing dashboards (latest value only)."""
    for fig, (name, help_, factor) in DCGM.items():
        fam = GaugeMetricFamily(name, help_, labels=DCGM_LABELS)
        for d, (last, _mx, _avg) in _each(snap, fig):
            fam.add_metric(_labels(d), float(round(last * factor)))
        if fam.samples:
            yield fam


def _own_families(snap: dict):
    """Our base-unit names, with the window max/avg for the figures that move between scrapes."""
    for fig, (name, help_) in OWN.items():
        fams = [GaugeMetricFamily(name, help_, labels=OWN_LABELS)]
        if fig in WINDOWED:
            fams.append(
                GaugeMetricFamily(name + "_window_max", help_ + " Max since the last scrape.", labels=OWN_LABELS)
            )
            fams.append(
                GaugeMetricFamily(name + "_window_avg", help_ + " Average since the last scrape.", labels=OWN_LABELS)
            )
        for d, vals in _each(snap, fig):
            # vals is (last, max, avg); an unwindowed figure has one family and keeps only `last`
            for fam, v in zip(fams, vals, strict=False):
                fam.add_metric(_labels(d), v)
        for fam in fams:
            if fam.samples:
                yield fam


def _energy_families(snap: dict):
    """The energy counter (a real counter here, unlike dcgm's gauge)."""
    energy = CounterMetricFamily(
        "llm_locust_gpu_energy_joules", "GPU energy used since driver load.", labels=OWN_LABELS
    )
    for d, (last, _mx, _avg) in _each(snap, "energy_joules"):
        energy.add_metric(_labels(d), last)
    if energy.samples:
        yield energy


def _throttle_families(snap: dict):
    """The throttle-reason bitmask spread into one 0/1 series per named reason."""
    thr = GaugeMetricFamily(
        "llm_locust_gpu_throttle_reason",
        "1 while this clock throttle reason is active.",
        labels=OWN_LABELS + ["reason"],
    )
    for d, (last, _mx, _avg) in _each(snap, "throttle_reasons"):
        bits = int(last)
        for bit, reason in THROTTLE_REASONS.items():
            thr.add_metric(_labels(d) + [reason], 1.0 if bits & bit else 0.0)
    if thr.samples:
        yield thr


def _process_families(snap: dict):
    """GPU memory per compute process (from the slower process-list reads)."""
    pm = GaugeMetricFamily(
        "llm_locust_gpu_process_memory_used_bytes",
        "GPU memory used by one compute process (refreshed every --process-interval).",
        labels=OWN_LABELS + ["pid", "process_name"],
    )
    for d in snap["devices"]:
        for p in snap["procs"].get(d.key, ()):
            if p.used_bytes is not None:
                pm.add_metric(_labels(d) + [str(p.pid), p.name], float(p.used_bytes))
    if pm.samples:
        yield pm


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-locust gpu-sidecar", description="Serve GPU (NVML) metrics for Prometheus.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9401, help="port (default 9401; 0 picks a free one)")
    p.add_argument("--interval", type=float, default=0.1, help="seconds between cheap samples (default 0.1 = 10 Hz)")
    p.add_argument("--process-interval", type=float, default=5.0, help="seconds between process-list reads (default 5)")
    p.add_argument("--fake", type=int, default=0, metavar="N", help="serve N fake H200-like GPUs instead of NVML")
    p.add_argument("--no-dcgm-names", action="store_true", help="export only the llm_locust_gpu_* names")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if not (0 < args.interval <= 3600 and 0 < args.process_interval <= 3600):  # nan fails this too
        print(
            "llm-locust gpu-sidecar: --interval and --process-interval must be > 0 and at most 3600 s", file=sys.stderr
        )
        return 2
    if args.fake < 0 or not 0 <= args.port <= 65535:
        print("llm-locust gpu-sidecar: --fake must be >= 0 and --port within 0-65535", file=sys.stderr)
        return 2
    done = threading.Event()

    def _stop(*_):
        done.set()

    signal.signal(signal.SIGTERM, _stop)  # from here on: a signal right after the first line ends us cleanly
    signal.signal(signal.SIGINT, _stop)
    backend: Backend = FakeBackend(args.fake) if args.fake > 0 else NvmlBackend()
    sampler = Sampler(backend, interval=args.interval, process_interval=args.process_interval)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(sampler, dcgm=not args.no_dcgm_names))
    sampler.start()  # before serving, so the first scrape already has figures (or up 0)
    try:
        server, _thread = start_http_server(args.port, addr=args.host, registry=registry)
    except OSError as e:
        print(
            f"llm-locust gpu-sidecar: cannot listen on {args.host or '0.0.0.0'}:{args.port}: {e.strerror or e}",
            file=sys.stderr,
            flush=True,
        )
        sampler.stop()
        return 2
    host, port = server.server_address[:2]
    if isinstance(host, (bytes, bytearray)):  # typeshed allows bytes; getsockname gives str
        host = host.decode()
    print(f"llm-locust gpu-sidecar listening on http://{args.host if args.host else host}:{port}", flush=True)
    try:
        while not done.wait(1.0):
            pass
    finally:
        sampler.stop()
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

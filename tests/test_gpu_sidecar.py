"""GPU sidecar: faked pynvml functions (no GPU here), names/labels/units, a real subprocess."""

import logging
import re
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import need_binary

from llm_locust.gpu.nvml import FakeBackend, MiB, NvmlBackend
from llm_locust.gpu.sidecar import GpuCollector, Sampler

GiB = 1024 * MiB


def err(code):
    return pynvml.NVMLError(code)  # maps to the NVMLError_* subclass, like the real library


class FakeGPU:
    def __init__(self, i):
        self.i = i
        self.used = (10 + i) * GiB
        self.fail = {}  # figure -> exception class code, raised on every call
        self.lost = None


@pytest.fixture
def nv(monkeypatch):
    """Fake the pynvml.nvml* functions used by NvmlBackend; returns the list of fake GPUs."""
    gpus = [FakeGPU(0), FakeGPU(1)]
    state = SimpleNamespace(gpus=gpus, init_error=None, v2_missing=False, calls=[])

    def dev(h):
        g = gpus[h]
        if g.lost is not None:
            raise err(g.lost)
        return g

    def chk(h, fig):
        g = dev(h)
        if fig in g.fail:
            raise err(g.fail[fig])
        return g

    def init():
        if state.init_error is not None:
            raise err(state.init_error)

    def mem(h, version=None):
        g = chk(h, "memory")
        state.calls.append(("mem", version))
        if version:
            if state.v2_missing:
                raise err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return SimpleNamespace(
                total=141 * GiB, reserved=512 * MiB, used=g.used, free=141 * GiB - 512 * MiB - g.used
            )
        return SimpleNamespace(total=141 * GiB, used=g.used, free=141 * GiB - g.used)

    p = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 12040,
        "nvmlDeviceGetMinorNumber": lambda h: h,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h:08d}",
        "nvmlDeviceGetName": lambda h: "NVIDIA H200",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0"),
        "nvmlDeviceGetMigMode": lambda h: (_ for _ in ()).throw(err(pynvml.NVML_ERROR_NOT_SUPPORTED)),
        "nvmlDeviceGetMemoryInfo": mem,
        "nvmlDeviceGetUtilizationRates": lambda h: (chk(h, "utilization"), SimpleNamespace(gpu=87, memory=40))[1],
        "nvmlDeviceGetPowerUsage": lambda h: (chk(h, "power"), 612345)[1],
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: (chk(h, "energy"), 5_000_000)[1],
        "nvmlDeviceGetClockInfo": lambda h, c: (chk(h, "sm_clock"), 1980)[1],
        "nvmlDeviceGetTemperatureV": lambda h, s: (chk(h, "temperature"), 66)[1],
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: (chk(h, "throttle"), 0x4)[1],
        "nvmlDeviceGetComputeRunningProcesses": lambda h: (
            chk(h, "processes"),
            [SimpleNamespace(pid=1234, usedGpuMemory=8 * GiB)],
        )[1],
        "nvmlSystemGetProcessName": lambda pid: b"/usr/bin/python3",
    }
    for k, v in p.items():
        monkeypatch.setattr(pynvml, k, v)
    return state


def scrape(sampler, dcgm=True):
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuCollector(sampler, dcgm=dcgm))
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return text, out


def value(m, name, **labels):
    hits = [v for lab, v in m.get(name, []) if all(lab.get(k) == str(x) for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, m.get(name))
    return hits[0]


def make(interval=0.1):
    s = Sampler(NvmlBackend(), interval=interval, process_interval=5.0)
    assert s.open()
    return s


def test_names_labels_units(nv):
    s = make()
    s.sample_once(now=0.0)
    text, m = scrape(s)
    assert value(m, "llm_locust_gpu_up") == 1
    lab = dict(gpu="0", UUID="GPU-00000000", device="nvidia0", modelName="NVIDIA H200", pci_bus_id="00000000:18:00.0")
    assert value(m, "DCGM_FI_DEV_GPU_UTIL", **lab) == 87
    assert value(m, "DCGM_FI_DEV_MEM_COPY_UTIL", **lab) == 40
    assert value(m, "DCGM_FI_DEV_FB_USED", **lab) == 10 * 1024  # MiB
    assert value(m, "DCGM_FI_DEV_FB_RESERVED", **lab) == 512
    assert value(m, "DCGM_FI_DEV_FB_FREE", **lab) == 141 * 1024 - 512 - 10 * 1024
    assert value(m, "DCGM_FI_DEV_POWER_USAGE", **lab) == 612  # W
    assert value(m, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **lab) == 5_000_000  # mJ
    assert value(m, "DCGM_FI_DEV_SM_CLOCK", **lab) == 1980  # MHz
    assert value(m, "DCGM_FI_DEV_GPU_TEMP", **lab) == 66
    own = dict(gpu="1", uuid="GPU-00000001", model_name="NVIDIA H200")
    assert value(m, "llm_locust_gpu_memory_used_bytes", **own) == 11 * GiB
    assert value(m, "llm_locust_gpu_memory_total_bytes", **own) == 141 * GiB
    assert value(m, "llm_locust_gpu_utilization_ratio", **own) == pytest.approx(0.87)
    assert value(m, "llm_locust_gpu_power_watts", **own) == pytest.approx(612.345)
    assert value(m, "llm_locust_gpu_energy_joules_total", **own) == pytest.approx(5000.0)
    assert value(m, "llm_locust_gpu_sm_clock_hertz", **own) == pytest.approx(1.98e9)
    assert value(m, "llm_locust_gpu_temperature_celsius", **own) == 66
    assert value(m, "llm_locust_gpu_throttle_reason", reason="sw_power_cap", **own) == 1
    assert value(m, "llm_locust_gpu_throttle_reason", reason="hw_slowdown", **own) == 0
    assert value(m, "llm_locust_gpu_process_memory_used_bytes", pid=1234, process_name="python3", **own) == 8 * GiB
    info = value(m, "llm_locust_gpu_info", driver_version="550.54.15", cuda_version="12.4", **own)
    assert info == 1
    assert value(m, "llm_locust_gpu_health", **own) == 1
    assert "# TYPE llm_locust_gpu_energy_joules_total counter" in text
    assert "_created" not in text


def test_window_max_and_avg_keep_short_peaks(nv):
    s = make()
    for used in (10, 30, 20):  # a short peak between scrapes
        nv.gpus[0].used = used * GiB
        s.sample_once(now=0.0)
    _, m = scrape(s)
    lab = dict(gpu="0")
    assert value(m, "llm_locust_gpu_memory_used_bytes", **lab) == 20 * GiB
    assert value(m, "llm_locust_gpu_memory_used_bytes_window_max", **lab) == 30 * GiB
    assert value(m, "llm_locust_gpu_memory_used_bytes_window_avg", **lab) == 20 * GiB
    # The window resets at each scrape; with no new sample it reports the last value.
    _, m = scrape(s)
    assert value(m, "llm_locust_gpu_memory_used_bytes_window_max", **lab) == 20 * GiB


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_library_or_driver_keeps_serving_up_0(nv, code, caplog):
    nv.init_error = code
    s = Sampler(NvmlBackend(), interval=0.1)
    with caplog.at_level(logging.ERROR, logger="llm_locust.gpu"):
        s.start()  # does not raise
        s.stop()
    text, m = scrape(s)
    assert value(m, "llm_locust_gpu_up") == 0
    assert "DCGM_" not in text and "llm_locust_gpu_health" not in text
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "NVML unavailable" in errors[0].getMessage()


def test_not_supported_series_left_out_not_zero(nv):
    nv.gpus[1].fail["power"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    nv.gpus[1].fail["utilization"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    s = make()
    s.sample_once(now=0.0)
    s.sample_once(now=0.1)
    _, m = scrape(s)
    assert [lab["gpu"] for lab, _ in m["DCGM_FI_DEV_POWER_USAGE"]] == ["0"]
    assert [lab["gpu"] for lab, _ in m["llm_locust_gpu_power_watts"]] == ["0"]
    assert [lab["gpu"] for lab, _ in m["llm_locust_gpu_utilization_ratio_window_max"]] == ["0"]
    assert [lab["gpu"] for lab, _ in m["DCGM_FI_DEV_GPU_UTIL"]] == ["0"]
    assert value(m, "llm_locust_gpu_health", gpu=1) == 1  # the rest of GPU 1 is fine
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu=1) == 11 * 1024


def test_not_supported_everywhere_drops_family(nv):
    for g in nv.gpus:
        g.fail["energy"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    s = make()
    s.sample_once(now=0.0)
    text, _ = scrape(s)
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in text
    assert "llm_locust_gpu_energy_joules" not in text


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN])
def test_gpu_lost_mid_run_health_0_others_go_on(nv, code, caplog):
    s = make()
    s.sample_once(now=0.0)
    nv.gpus[0].lost = code
    with caplog.at_level(logging.ERROR, logger="llm_locust.gpu"):
        s.sample_once(now=0.1)
        s.sample_once(now=0.2)
    _, m = scrape(s)
    assert value(m, "llm_locust_gpu_health", gpu=0) == 0
    assert value(m, "llm_locust_gpu_health", gpu=1) == 1
    assert value(m, "llm_locust_gpu_up") == 1
    assert [lab["gpu"] for lab, _ in m["DCGM_FI_DEV_FB_USED"]] == ["1"]  # no stale figures for GPU 0
    assert "GPU 0" in caplog.text and len([r for r in caplog.records if "lost" in r.getMessage()]) == 1
    # It comes back (Unknown can be transient): health 1 again at the next retry.
    nv.gpus[0].lost = None
    s.sample_once(now=10.0)
    _, m = scrape(s)
    assert value(m, "llm_locust_gpu_health", gpu=0) == 1


def test_memory_v2_function_not_found_falls_back_to_v1(nv):
    nv.v2_missing = True
    s = make()
    s.sample_once(now=0.0)
    s.sample_once(now=0.1)
    text, m = scrape(s)
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu=0) == 10 * 1024
    assert value(m, "llm_locust_gpu_memory_total_bytes", gpu=0) == 141 * GiB
    assert "FB_RESERVED" not in text and "memory_reserved" not in text  # v1 has no reserved figure
    assert nv.calls.count(("mem", pynvml.nvmlMemory_v2)) == 1  # v2 tried once, then v1 only


def test_other_error_on_one_figure_is_left_out(nv):
    nv.gpus[0].fail["temperature"] = pynvml.NVML_ERROR_NO_PERMISSION
    s = make()
    s.sample_once(now=0.0)
    _, m = scrape(s)
    assert [lab["gpu"] for lab, _ in m["DCGM_FI_DEV_GPU_TEMP"]] == ["1"]
    assert value(m, "llm_locust_gpu_health", gpu=0) == 1


def test_sampler_thread_samples_until_stopped():
    s = Sampler(FakeBackend(2), interval=0.01, process_interval=1.0)
    s.start()
    try:
        deadline = time.monotonic() + 10
        while s.samples < 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the sample count, bounded by the deadline
    finally:
        s.stop()
    assert s.samples >= 5
    assert s._thread is not None and not s._thread.is_alive()  # stop() ends the thread


def test_fake_backend_lost_device():
    b = FakeBackend(3)
    s = Sampler(b)
    s.open()
    s.sample_once(now=0.0)
    b.lost.add("1")
    s.sample_once(now=0.1)
    _, m = scrape(s)
    assert [value(m, "llm_locust_gpu_health", gpu=i) for i in range(3)] == [1, 0, 1]


# -- a real subprocess ----------------------------------------------------------------------------


@pytest.fixture
def sidecar_proc():
    procs = []

    def start(*extra):
        p = subprocess.Popen(
            [sys.executable, "-m", "llm_locust.gpu.sidecar", "--fake", "2", "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        line = p.stdout.readline()
        mt = re.fullmatch(r"llm-locust gpu-sidecar listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert mt, (line, p.stderr.read() if p.poll() is not None else "")
        return mt.group(1)

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        assert p.returncode == 0, p.stderr.read()


def fetch(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def test_subprocess_fake_2_scrape(sidecar_proc):
    url = sidecar_proc()
    time.sleep(0.5)
    text = fetch(url)
    m = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            m.setdefault(s.name, []).append((s.labels, s.value))
    assert value(m, "llm_locust_gpu_up") == 1
    assert len(m["DCGM_FI_DEV_FB_USED"]) == 2
    for i in range(2):
        assert value(m, "DCGM_FI_DEV_FB_USED", gpu=i) + value(m, "DCGM_FI_DEV_FB_FREE", gpu=i) + 512 == pytest.approx(
            143771, abs=1
        )
        assert 0 <= value(m, "DCGM_FI_DEV_GPU_UTIL", gpu=i) <= 100
        assert 90 <= value(m, "DCGM_FI_DEV_POWER_USAGE", gpu=i) <= 700
        assert value(m, "llm_locust_gpu_memory_total_bytes", gpu=i) == 143771 * MiB
        avg = value(m, "llm_locust_gpu_power_watts_window_avg", gpu=i)
        assert value(m, "llm_locust_gpu_power_watts_window_max", gpu=i) >= avg
        assert value(m, "llm_locust_gpu_health", gpu=i) == 1
        assert "H200" in [lab for lab, _ in m["llm_locust_gpu_info"]][i]["model_name"]
    assert len(m["llm_locust_gpu_process_memory_used_bytes"]) == 2


def test_promtool_check_metrics(sidecar_proc):
    promtool = need_binary("promtool")
    # Our own names alone: a clean pass.
    own = fetch(sidecar_proc("--no-dcgm-names"))
    r = subprocess.run([promtool, "check", "metrics"], input=own, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # With the dcgm-exporter names: it parses; the only lint findings are dcgm-exporter's own
    # camelCase label (modelName), which dashboards need verbatim.
    full = fetch(sidecar_proc())
    r = subprocess.run([promtool, "check", "metrics"], input=full, capture_output=True, text=True)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode in (0, 3), r.stdout + r.stderr
    assert all(
        re.fullmatch(r"DCGM_FI_DEV_\w+ label names should be written in 'snake_case' not 'camelCase'", ln)
        for ln in problems
    ), problems


def test_mig_instances_are_devices_of_their_own(nv, monkeypatch):
    """GPU 0 in MIG mode with instances in slots 0 and 2 of 7: each exported with its GPU
    instance id; NVML answers NotSupported for utilisation on a MIG handle, so that series is
    left out for the instances and kept for whole GPUs."""
    mig = {0: 2, 2: 3}  # MIG slot -> fake device index (handles 2 and 3)
    for slot, h in mig.items():
        g = FakeGPU(h)
        g.used = (2 + slot) * GiB
        g.fail["utilization"] = pynvml.NVML_ERROR_NOT_SUPPORTED
        nv.gpus.append(g)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)

    def mig_mode(h):
        if h != 0:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def mig_handle(h, j):
        if j not in mig:
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return mig[j]

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", mig_mode)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 7)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceId", lambda h: {2: 1, 3: 5}[h])
    s = make()
    assert [d.key for d in s.devices] == ["0", "0/mig0", "0/mig2", "1"]
    s.sample_once(now=0.0)
    _, m = scrape(s)
    assert value(m, "llm_locust_gpu_memory_used_bytes", gpu="0", gpu_instance_id="1") == 2 * GiB
    assert value(m, "llm_locust_gpu_memory_used_bytes", gpu="0", gpu_instance_id="5") == 4 * GiB
    assert value(m, "llm_locust_gpu_memory_used_bytes", gpu="0", gpu_instance_id="") == 10 * GiB
    assert value(m, "llm_locust_gpu_health", gpu="0", gpu_instance_id="5") == 1
    util = sorted((lab["gpu"], lab["gpu_instance_id"]) for lab, _ in m["llm_locust_gpu_utilization_ratio"])
    assert util == [("0", ""), ("1", "")]
    assert value(m, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="5") == 4 * 1024  # dcgm-exporter's MIG label
    # the instances' own UUIDs (MIG-...) tell them apart in the info series
    assert len({lab["uuid"] for lab, _ in m["llm_locust_gpu_info"]}) == 4

"""The results file: versioned, checked on reading, reproducible, never holding a secret."""

import hashlib
import json
import os
import subprocess
import sys

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support import free_port

from llm_locust.analysis.server_metrics import efficiency_table, info_series, samples
from llm_locust.gpu.nvml import FakeBackend
from llm_locust.gpu.sidecar import GpuCollector, Sampler
from llm_locust.metrics.aggregate import Aggregate, figures
from llm_locust.report.provenance import gpu_facts, redact_argv, trace_facts
from llm_locust.report.results import (
    SCHEMA_VERSION,
    ResultsError,
    build_results,
    distributions,
    read_results,
    validity,
    write_results,
)
from llm_locust.transport.probe import probe_server


def _agg(ttfts=(0.05, 0.07, 0.2, 1.5)) -> Aggregate:
    agg = Aggregate()
    for v in ttfts:
        agg.hist["ttft"].record(v)
    for v in (0.008, 0.009, 0.012, 0.5):
        agg.hist["itl"].record(v, count=10)
    return agg


def _results(tmp_path, **extra):
    res = build_results(_agg(), {}, {"settings": {}, **extra})
    path = tmp_path / "r.json"
    write_results(path, res)
    return path, res


def test_distributions_keep_every_sample_in_log_bins():
    agg = _agg()
    d = distributions(agg)
    assert sum(n for _lo, _hi, n in d["ttft"]) == 4
    assert sum(n for _lo, _hi, n in d["itl"]) == 40
    assert d["e2e"] == []
    for low, high, _n in d["ttft"]:
        assert 1.2 < high / low < 1.3  # 10 bins per decade
    # each sample falls in a bin that contains it
    for v in (0.05, 0.07, 0.2, 1.5):
        assert any(lo <= v * 1.001 and v * 0.999 < hi for lo, hi, _n in d["ttft"]), v
    lows = [lo for lo, _hi, _n in d["itl"]]
    assert lows == sorted(lows)


def test_validity_marks_each_kind_of_suspect_figure():
    f = figures(Aggregate())
    assert validity(f) == ["no_data"]
    f.update(ok=10, error_rate=0.2, length_mismatch=1)
    f["client"]["valid"] = False
    assert validity(f) == ["client_saturated", "errors", "length_mismatch"]
    assert "errors" not in validity(f, max_error_rate=0.5)


def test_written_results_load_back(tmp_path):
    path, res = _results(tmp_path)
    doc = read_results(path)
    assert doc["version"] == SCHEMA_VERSION == res["version"]
    assert doc["distributions"]["ttft"] == [list(b) for b in res["distributions"]["ttft"]]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda b: b[: len(b) // 2], "truncated JSON"),
        (lambda b: b"", "empty file"),
        (lambda b: b"{nope", "not valid JSON"),
        (lambda b: b"[1, 2]", "not an llm-locust results file"),
        (lambda b: orjson.dumps({**orjson.loads(b), "schema": "other/thing"}), "schema 'other/thing'"),
        (lambda b: orjson.dumps({**orjson.loads(b), "version": 99}), "version 99"),
        (lambda b: orjson.dumps({k: v for k, v in orjson.loads(b).items() if k != "summary"}), "missing summary"),
    ],
)
def test_unusable_results_files_get_a_clear_message(tmp_path, mangle, message):
    path, _ = _results(tmp_path)
    path.write_bytes(mangle(path.read_bytes()))
    with pytest.raises(ResultsError) as e:
        read_results(path)
    assert message in str(e.value) and str(path) in str(e.value)


def test_a_file_cut_at_any_byte_is_called_truncated(tmp_path):
    """orjson stops one byte before the end of `1.` and at the start of `nu`: a cut there is still
    a cut, not a spoiled file (CI once cut a file after a decimal point and was told "not valid")."""
    path, _ = _results(tmp_path)
    extra = {"x": [1.5e-3, -2, 0.25, True, False, None, "s"]}
    whole = orjson.dumps({**orjson.loads(path.read_bytes()), **extra}, option=orjson.OPT_INDENT_2)
    called = set()
    for n in range(1, len(whole)):
        path.write_bytes(whole[:n])
        with pytest.raises(ResultsError) as e:
            read_results(path)
        called.add(str(e.value).split(": ", 1)[1].split(" (")[0])
    assert called == {"truncated JSON"}
    path.write_bytes(whole.replace(b"0.25", b"0.25 ,,", 1))
    with pytest.raises(ResultsError, match="not valid JSON"):
        read_results(path)


def test_newer_version_says_upgrade_and_missing_file_is_named(tmp_path):
    path, _ = _results(tmp_path)
    path.write_bytes(orjson.dumps({**orjson.loads(path.read_bytes()), "version": SCHEMA_VERSION + 1}))
    with pytest.raises(ResultsError, match="upgrade"):
        read_results(path)
    with pytest.raises(ResultsError, match="cannot read"):
        read_results(tmp_path / "absent.json")


def test_version_1_files_still_load_with_derived_marks(tmp_path):
    path, res = _results(tmp_path)
    old = {k: v for k, v in res.items() if k not in ("validity", "distributions")}
    old["version"] = 1
    path.write_bytes(orjson.dumps(old))
    doc = read_results(path)
    assert doc["validity"]["flags"] == validity(res["summary"])


def test_secret_in_any_figure_is_masked_on_write(tmp_path):
    key = "sk-live-0123456789"
    res = build_results(_agg(), {}, {"settings": {}, "note": f"HTTP 401: bad key {key}"})
    write_results(tmp_path / "r.json", res, secrets=(key,))
    text = (tmp_path / "r.json").read_text()
    assert key not in text and "bad key ***" in text


def test_redact_argv_masks_secret_values_only():
    argv = [
        "llm-locust",
        "run",
        "--api-key",
        "sk-1",
        "--header=Authorization: Bearer x",
        "-H",
        "X-Token: y",
        "Authorization: Bearer z",
        "--api-key-env",
        "MY_KEY",
        "--users",
        "4",
    ]
    assert redact_argv(argv) == [
        "llm-locust",
        "run",
        "--api-key",
        "***",
        "--header=***",
        "-H",
        "***",
        "***",
        "--api-key-env",
        "MY_KEY",
        "--users",
        "4",
    ]


def test_trace_facts_hash_the_bytes(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"input_tokens": 5, "output_tokens": 7}\n' * 1000)
    f = trace_facts(str(p), "jsonl")
    assert f["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest() and f["bytes"] == p.stat().st_size
    assert "error" in trace_facts(str(tmp_path / "gone.jsonl"))
    assert trace_facts("") is None


def test_gpu_facts_from_the_sidecars_info_series():
    sampler = Sampler(FakeBackend(2), interval=0.05, process_interval=5.0)
    assert sampler.open()
    sampler.sample_once()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuCollector(sampler, dcgm=True))
    info = info_series(samples(generate_latest(reg).decode()))
    gpus = gpu_facts(info)
    assert [g["gpu"] for g in gpus] == ["0", "1"]
    assert all("H200" in g["model_name"] and g["driver_version"] and g["cuda_version"] and g["uuid"] for g in gpus)
    assert len({g["uuid"] for g in gpus}) == 2
    # dcgm-exporter alone (no llm_locust_gpu_info): the model from its labels
    dcgm_only = {k: v for k, v in info.items() if k.startswith("DCGM_FI_")}
    assert [g["model_name"] for g in gpu_facts(dcgm_only)] == [g["model_name"] for g in gpus]


def test_probe_reads_models_and_version_from_a_real_http_server(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "models").write_text(
        json.dumps(
            {"object": "list", "data": [{"id": "m-1", "owned_by": "vllm", "max_model_len": 4096, "permission": [{}]}]}
        )
    )
    (tmp_path / "version").write_text(json.dumps({"version": "0.32.0"}))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert "Serving HTTP" in proc.stdout.readline()
        facts = probe_server(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)
    assert facts["models"] == [{"id": "m-1", "owned_by": "vllm", "max_model_len": 4096}]
    assert facts["version"] == {"version": "0.32.0"} and facts["version_endpoint"] == "/version"


def test_probe_of_nothing_listening_costs_only_the_facts():
    facts = probe_server(f"http://127.0.0.1:{free_port()}", timeout=1.0)
    assert facts["models"] == [] and facts["version"] is None and "error" in facts


def test_efficiency_table_shows_what_was_measured():
    eff = {
        "baseline_gpu_memory_gib": 2.0,
        "max_load_before_kv_saturation": 8.0,
        "steps": [
            {
                "step": 1,
                "offered": 4.0,
                "output_tokens_per_s": 400.0,
                "gpu_memory_used_gib": 70.0,
                "gpu_memory_beyond_baseline_gib": 68.0,
                "output_tokens_per_s_per_gib": 400 / 70,
                "kv_cache_usage_max": 0.5,
                "preemptions": 0.0,
                "kv_saturated": False,
            },
            {
                "step": 2,
                "offered": 16.0,
                "output_tokens_per_s": 900.0,
                "kv_cache_usage_max": 1.0,
                "preemptions": 3.0,
                "kv_saturated": True,
            },
        ],
    }
    text = efficiency_table(eff)
    lines = text.splitlines()
    assert "GPU mem GiB" in lines[1] and "KV max %" in lines[1]
    assert "70.0" in lines[3] and "50.0" in lines[3] and "KV saturated" not in lines[3]
    assert "100.0" in lines[4] and lines[4].endswith("KV saturated") and " - " in lines[4]
    assert "idle GPU memory before the load: 2.0 GiB" in text and text.endswith(": 8")
    assert (
        efficiency_table({"steps": [{"step": 1, "offered": 1.0, "output_tokens_per_s": 1.0, "kv_saturated": False}]})
        == ""
    )


def test_a_real_run_records_how_to_reproduce_it(tmp_path):
    secret = "sk-test-repro-0123456789"
    results = tmp_path / "r.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "-t",
            "3s",
            "-u",
            "2",
            "--seed",
            "7",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENAI_API_KEY": secret},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    text = results.read_text()
    assert secret not in text and secret not in p.stdout + p.stderr
    doc = read_results(results)
    env, run = doc["environment"], doc["run"]
    assert env["server"]["models"][0]["id"] == env["server"]["model"] == "llm-locust-sim"
    assert env["server"]["kind"] == "llm-locust-sim"  # the simulator names itself (it speaks vLLM's metric names)
    trace = run["settings"]["trace"]
    assert env["trace"]["sha256"] == hashlib.sha256(open(trace, "rb").read()).hexdigest()
    assert run["seed"] == 7 and run["started_at_utc"].endswith("+00:00")
    assert run["command"][:2] == ["llm-locust", "run"] or "llm_locust" in " ".join(run["command"])
    assert sum(n for *_b, n in doc["distributions"]["ttft"]) == doc["summary"]["latency"]["ttft"]["count"]
    assert doc["validity"]["flags"] == validity(doc["summary"])
    assert run["load"]["mode"] == "closed" and run["load"]["users"] == 2
    assert doc["summary"]["goodput_requests_per_s"] is None  # no per-request SLO: no goodput figure


def test_figures_missing_a_part_are_a_clear_error_not_a_traceback(tmp_path):
    """A summary without `client` (edited, or cut by hand) gave a KeyError traceback in `report`."""
    good, _ = _results(tmp_path)
    doc = json.loads(good.read_text())
    del doc["summary"]["client"], doc["validity"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"bad.json: incomplete results file: its figures lack 'client'"):
        read_results(bad)

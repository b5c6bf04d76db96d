"""Verdicts (analysis/efficiency.py): per-GPU throughput, interactivity and the Pareto frontier,
J/token and $/Mtok, against hand-computed values on synthetic steps and on the fake GPU
sidecar's own exposition (FakeBackend with a fixed clock, read through the real windowing)."""

import math
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from llm_locust.analysis import efficiency as ef
from llm_locust.analysis import server_metrics as sm
from llm_locust.gpu.nvml import FakeBackend
from llm_locust.gpu.sidecar import GpuCollector, Sampler


def cfg(**kw):
    base = dict(gpus=None, prefill_gpus=None, decode_gpus=None, gpu_hour_price=None, gpu_prices={})
    base.update(kw)
    return SimpleNamespace(**base)


def step(n, out_tps, tpot, window=10.0, offered=None, flags=()):
    return {
        "step": n,
        "offered": float(offered if offered is not None else n),
        "output_tokens_per_s": out_tps,
        "window_start": 100.0,
        "window_end": 100.0 + window,
        "window": window,
        "latency": {"tpot": {"p50": tpot}},
        "flags": list(flags),
    }


def row(v, n):
    return next(r for r in v["steps"] if r["step"] == n)


# ---- per-GPU division ----


def test_per_gpu_division():
    v = ef.verdicts([step(1, 1000.0, 0.02)], None, [], cfg(gpus=4), step_tokens={1: (500, 1000)})
    r = row(v, 1)
    assert r["input_tokens_per_s"] == pytest.approx(500.0)  # 1000 tok/s x 500/1000 input per output token
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(250.0)
    assert r["input_tokens_per_s_per_gpu"] == pytest.approx(125.0)
    assert r["total_tokens_per_s_per_gpu"] == pytest.approx(375.0)
    assert r["interactivity"] == pytest.approx(50.0)  # 1 / 20 ms
    assert r["gpu_hours"] == pytest.approx(4 * 10 / 3600)
    assert v["gpus"] == {"gpus": 4, "prefill_gpus": None, "decode_gpus": None, "disaggregated": False}


def test_disaggregated_division():
    """Output over the decode GPUs, input over the prefill GPUs, total over both (InferenceX)."""
    v = ef.verdicts(
        [step(1, 1200.0, 0.02)],
        None,
        [],
        cfg(prefill_gpus=2, decode_gpus=6, gpu_hour_price=2.0),
        step_tokens={1: (3000, 1200)},
    )
    r = row(v, 1)
    assert r["input_tokens_per_s"] == pytest.approx(3000.0)
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(200.0)  # 1200 / 6
    assert r["input_tokens_per_s_per_gpu"] == pytest.approx(1500.0)  # 3000 / 2
    assert r["total_tokens_per_s_per_gpu"] == pytest.approx(4200.0 / 8)
    # cost over all 8 GPUs: 8 x $2 / 3600 s per 1200 tokens/s
    assert r["usd_per_million_output_tokens"] == pytest.approx(8 * 2.0 / 3600 / 1200 * 1e6)
    assert v["gpus"]["disaggregated"] and v["gpus"]["gpus"] == 8


# ---- the frontier ----


def test_frontier_membership_and_a_dominated_step():
    # gpus=1: x = tok/s; y = 1/TPOT
    steps = [step(1, 50.0, 1 / 60), step(2, 100.0, 1 / 50), step(3, 150.0, 1 / 30), step(4, 200.0, 1 / 40)]
    v = ef.verdicts(steps, None, [], cfg(gpus=1))
    on = {r["step"]: r["pareto"] for r in v["steps"]}
    assert on == {1: True, 2: True, 3: False, 4: True}  # step 3 (150, 30) is beaten by step 4 (200, 40) in both
    assert v["frontier"] == [1, 2, 4]  # by tok/s/GPU
    assert ef.frontier_points(v) == [
        (50.0, pytest.approx(60.0)),
        (100.0, pytest.approx(50.0)),
        (200.0, pytest.approx(40.0)),
    ]


def test_pareto_front_rules():
    assert ef.pareto_front([(1, 1), (1, 1)]) == [True, True]  # equal points: both on it
    assert ef.pareto_front([(1, 2), (1, 1)]) == [True, False]  # as good in x, better in y
    assert ef.pareto_front([(1, 2), None, (2, 1)]) == [True, False, True]


def test_frontier_dominance_verdicts():
    a = [(100, 50), (200, 40)]
    assert ef.frontier_verdict(a, [(90, 45), (150, 40)]) == "dominates"
    assert ef.frontier_verdict([(90, 45)], a) == "dominated"
    assert ef.frontier_verdict(a, list(a)) == "equal"
    assert ef.frontier_verdict(a, [(300, 10), (50, 60)]) == "crossing"
    assert ef.frontier_verdict(a, []) == "n/a"


# ---- energy ----


def test_joules_per_token_from_the_counter():
    gw = {
        "step": 1,
        "samples": 11,
        "gpu_energy_joules_total": {"increase": 8510.0, "per_s": 851.0},
        "gpu_power_watts": {"mean": 999.0, "max": 1000.0},
    }  # the counter wins over power
    r = row(ef.verdicts([step(1, 425.5, 0.02)], [gw], [], cfg(gpus=2)), 1)
    assert r["energy_from"] == "counter"
    assert r["gpu_power_watts"] == pytest.approx(851.0)
    assert r["energy_joules"] == pytest.approx(8510.0)  # 851 W x 10 s
    assert r["joules_per_output_token"] == pytest.approx(2.0)  # 851 J/s / 425.5 tok/s
    assert r["energy_valid"] and r["energy_flags"] == []
    # dcgm-exporter's counter, in mJ
    gw2 = {"step": 1, "samples": 11, "gpu_energy_millijoules_total": {"increase": 8.51e6, "per_s": 8.51e5}}
    assert row(ef.verdicts([step(1, 425.5, 0.02)], [gw2], [], cfg()), 1)["joules_per_output_token"] == pytest.approx(
        2.0
    )


def test_joules_per_token_from_integrated_power():
    gw = {"step": 1, "samples": 20, "gpu_power_watts": {"mean": 700.0, "max": 800.0}}
    r = row(ef.verdicts([step(1, 350.0, 0.02)], [gw], [], cfg()), 1)
    assert r["energy_from"] == "power"
    assert r["energy_joules"] == pytest.approx(7000.0)  # 700 W x 10 s
    assert r["joules_per_output_token"] == pytest.approx(2.0)
    assert "output_tokens_per_s_per_gpu" not in r  # no --gpus: energy still, per-GPU not


def test_too_few_samples_is_flagged():
    few = {"step": 1, "samples": ef.MIN_ENERGY_SAMPLES - 1, "gpu_power_watts": {"mean": 700.0, "max": 700.0}}
    r = row(ef.verdicts([step(1, 350.0, 0.02)], [few], [], cfg()), 1)
    assert r["joules_per_output_token"] == pytest.approx(2.0) and r["energy_flags"] == ["few_samples"]
    assert r["energy_valid"] is False
    # enough scrapes, but the counter's samples span 3 s of a 10 s window
    short = {"step": 1, "samples": 6, "gpu_energy_joules_total": {"increase": 2100.0, "per_s": 700.0}}
    assert row(ef.verdicts([step(1, 350.0, 0.02)], [short], [], cfg()), 1)["energy_flags"] == ["few_samples"]
    # a counter that went back (a GPU reset or lost): power is used, and it says why
    reset = {
        "step": 1,
        "samples": 10,
        "gpu_energy_joules_total": {"increase": -5.0, "per_s": -0.5},
        "gpu_power_watts": {"mean": 700.0, "max": 700.0},
    }
    r = row(ef.verdicts([step(1, 350.0, 0.02)], [reset], [], cfg()), 1)
    assert r["energy_from"] == "power" and r["energy_flags"] == ["energy_counter_reset"]


def test_windows_are_matched_by_step_number():
    """A window the ladder never measured (no StepResult) does not shift the others."""
    gws = [
        {"step": 0, "samples": 9, "gpu_power_watts": {"mean": 100.0}},
        {"step": 1, "samples": 9, "gpu_power_watts": {"mean": 400.0}},
    ]
    assert row(ef.verdicts([step(1, 200.0, 0.02)], gws, [], cfg()), 1)["joules_per_output_token"] == pytest.approx(2.0)


# ---- cost ----


H200 = [{"gpu": "0", "model_name": "NVIDIA H200"}, {"gpu": "1", "model_name": "NVIDIA H200"}]


def test_cost_with_a_per_type_price():
    v = ef.verdicts(
        [step(1, 1000.0, 0.02)],
        None,
        H200,
        cfg(gpus=4, gpu_hour_price=1.0, gpu_prices={"A100": 1.8, "H200": 3.6}),
        step_tokens={1: (1000, 1000)},
        saturation={"saturation": {"step": 1}},
    )
    r = row(v, 1)
    assert v["price"] == {"usd_per_gpu_hour": 3.6, "source": "gpu_prices[H200]", "gpu_type": "NVIDIA H200"}
    assert r["usd_per_million_output_tokens"] == pytest.approx(4.0)  # 4 x $3.6/h = $0.004/s per 1000 tok/s
    assert r["usd_per_million_total_tokens"] == pytest.approx(2.0)  # per 2000 tok/s
    assert r["usd"] == pytest.approx(0.04)  # 10 s
    assert v["knee"]["step"] == 1 and v["knee"]["usd_per_million_output_tokens"] == pytest.approx(4.0)


def test_cost_with_the_flat_price_and_type_matching():
    v = ef.verdicts([step(1, 1000.0, 0.02)], None, H200, cfg(gpus=4, gpu_hour_price=1.8))
    assert v["price"]["source"] == "gpu_hour_price"
    assert row(v, 1)["usd_per_million_output_tokens"] == pytest.approx(2.0)
    # a type gpu_prices does not name: the flat price, with a note
    v = ef.verdicts(
        [step(1, 1000.0, 0.02)],
        None,
        [{"model_name": "NVIDIA A100X"}],
        cfg(gpus=4, gpu_hour_price=1.8, gpu_prices={"A100": 9.0}),
    )
    assert v["price"]["source"] == "gpu_hour_price" and any("A100X" in n for n in v["notes"])
    # the longest type named in the GPU's name wins
    assert ef._match_price("NVIDIA H100 80GB HBM3", {"H100": 2.0, "H100 80GB": 2.5}) == ("H100 80GB", 2.5)
    assert ef._match_price("nvidia h200 (fake)", {"H200": 3.5}) == ("H200", 3.5)


# ---- bad inputs ----


def test_without_gpus_the_figures_are_absent_not_wrong():
    gw = {"step": 1, "samples": 10, "gpu_power_watts": {"mean": 700.0}}
    v = ef.verdicts([step(1, 350.0, 0.02)], [gw], H200, cfg(gpu_hour_price=2.0))
    r = row(v, 1)
    for k in (
        "output_tokens_per_s_per_gpu",
        "total_tokens_per_s_per_gpu",
        "usd_per_million_output_tokens",
        "gpu_hours",
    ):
        assert k not in r
    assert r["pareto"] is False and v["frontier"] == []
    assert any("no GPU count" in n for n in v["notes"])
    assert r["joules_per_output_token"] == pytest.approx(2.0)  # energy needs no GPU count


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True, math.nan])
def test_bad_gpu_counts_are_ignored(bad):
    v = ef.verdicts([step(1, 350.0, 0.02)], None, [], cfg(gpus=bad, gpu_hour_price=2.0))
    assert v["gpus"] is None and "output_tokens_per_s_per_gpu" not in row(v, 1)
    assert any("gpus" in n for n in v["notes"])


def test_bad_figures_give_no_figure():
    steps = [step(1, math.nan, 0.02), step(2, 0.0, None), step(3, 100.0, 0.0)]
    v = ef.verdicts(
        steps, [{"step": 2, "samples": 10, "gpu_power_watts": {"mean": 500.0}}], [], cfg(gpus=2, gpu_hour_price=-1)
    )
    assert "output_tokens_per_s_per_gpu" not in row(v, 1)
    assert "joules_per_output_token" not in row(v, 2) and "interactivity" not in row(v, 2)  # 0 tok/s, no TPOT
    assert "interactivity" not in row(v, 3)  # a TPOT of 0
    assert v["price"] is None and all("usd_per_million_output_tokens" not in r for r in v["steps"])
    assert v["frontier"] == []
    only_one = ef.verdicts([step(1, 100.0, 0.02)], None, [], cfg(prefill_gpus=2))
    assert only_one["gpus"] is None and any("both" in n for n in only_one["notes"])


def test_from_a_results_dict_reads_the_plan_cost():
    res = {
        "summary": {
            "output_tokens_per_s": 800.0,
            "duration_s": 30.0,
            "tokens_in": 400,
            "tokens_out": 800,
            "latency": {"tpot": {"p50": 0.025}},
        },
        "steps": [{"step": 1, "tokens_in": 100, "tokens_out": 200}],
        "ladder": {"steps": [step(1, 1000.0, 0.02)], "saturation": {"saturation": {"step": 1}}},
        "plan": {"cost": {"gpus": 2, "gpu_hour_price": 3.6}},
        "gpu_metrics": {
            "steps": [{"step": 1, "samples": 10, "gpu_power_watts": {"mean": 1000.0}}],
            "run": {"samples": 40, "gpu_energy_joules_total": {"increase": 24000.0, "per_s": 800.0}},
        },
        "environment": {"gpus": H200},
    }
    v = ef.verdicts_for_results(res)
    r = row(v, 1)
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(500.0) and r["input_tokens_per_s"] == pytest.approx(500.0)
    assert r["joules_per_output_token"] == pytest.approx(1.0)
    assert v["run"]["output_tokens_per_s_per_gpu"] == pytest.approx(400.0)
    assert v["run"]["joules_per_output_token"] == pytest.approx(1.0)  # 800 W / 800 tok/s
    assert v["run"]["usd_per_million_output_tokens"] == pytest.approx(2 * 3.6 / 3600 / 800 * 1e6)
    assert "efficiency and cost" in ef.verdicts_table(v)
    assert ef.verdicts_for_results({"ladder": {}}) is None


# ---- the fake GPU sidecar's own figures ----


def test_energy_from_the_fake_sidecar_through_the_windowing(monkeypatch):
    """Two fake H200s near t=0 of a very long load period: GPU 0 at load 0.6 (start of its burst),
    GPU 1 at 0.5 (half a period later), so 90 + 610 x load = 456 W + 395 W = 851 W. Sampled every
    0.1 s and scraped every 1 s for 10 s: the counter rises 8510 J, power averages 851 W."""
    monkeypatch.setattr(sm, "TABLE", {**sm.TABLE, **ef.GPU_TABLE})
    monkeypatch.setattr(sm, "COUNTERS", sm.COUNTERS + ef.GPU_COUNTERS)
    now = [0.0]
    backend = FakeBackend(2, period=1e9, clock=lambda: now[0])
    sampler = Sampler(backend, interval=0.1)
    assert sampler.open()
    series = sm.ServerSeries("fake")
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuCollector(sampler, dcgm=True))
    for tick in range(101):
        now[0] = tick * 0.1
        sampler.sample_once(now=now[0])
        if tick % 10 == 0:
            kind, figs = sm.read(generate_latest(reg).decode())
            series.samples.append(sm.Sample(now[0], figs))
    w = series.window(0.0, 10.0)
    assert w["samples"] == 11
    assert w["gpu_energy_joules_total"]["increase"] == pytest.approx(8510.0, rel=1e-6)
    assert w["gpu_energy_millijoules_total"]["increase"] == pytest.approx(8.51e6, rel=1e-6)
    assert w["gpu_power_watts"]["mean"] == pytest.approx(851.0, rel=1e-6)
    st = step(1, 851.0 / 2, 0.02)
    st["window_start"], st["window_end"], st["window"] = 0.0, 10.0, 10.0
    v = ef.verdicts(
        [st], [{"step": 1, **w}], [{"model_name": "NVIDIA H200 (fake)"}] * 2, cfg(gpus=2, gpu_prices={"H200": 3.6})
    )
    r = row(v, 1)
    assert r["energy_from"] == "counter" and r["energy_valid"]
    assert r["joules_per_output_token"] == pytest.approx(2.0, rel=1e-6)
    assert v["price"]["source"] == "gpu_prices[H200]"
    assert r["usd_per_million_output_tokens"] == pytest.approx(2 * 3.6 / 3600 / 425.5 * 1e6)
    # without the counter (an exporter that has only power), the integrated power gives the same
    no_counter = {k: x for k, x in w.items() if "energy" not in k}
    r2 = row(ef.verdicts([st], [{"step": 1, **no_counter}], [], cfg()), 1)
    assert r2["energy_from"] == "power" and r2["joules_per_output_token"] == pytest.approx(2.0, rel=1e-6)

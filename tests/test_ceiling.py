"""A process over what one process holds (its token-rate ceiling) says so, live and in the results;
`--workers auto` plans with a calibrated ceiling (issue 37 item 2; docs/load-shapes.md "Worker
processes")."""

import json

import pytest
from support import run_ok

from llm_locust.metrics.ceiling import CeilingWatch, live_reason, row, summary_line
from llm_locust.settings import derive
from llm_locust.settings.workers import TOKENS_PER_PROCESS, calibration_path, ceiling, choose


def _cli(*argv: str) -> derive.Given:
    ns, rest = derive.run_parser().parse_known_args(list(argv))
    assert rest == []
    return derive.cli_values(ns)


def _calibrated(config, tokens: int) -> None:
    path = config / "llm-locust" / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tokens_per_process": tokens}))


def test_the_watch_rates_tokens_over_its_window_and_keeps_the_measured_peak():
    w = CeilingWatch(1_000, "built-in")
    w.sample(0.0, 10.0, True)
    w.add_tokens(3_000)
    assert w.sample(1.0, 50.0, False) == 3_000  # not measuring (a ramp): a rate, but no peak
    assert w.peak == 0 and not w.over and w.cpu_max == 0
    w.add_tokens(3_000)
    assert w.sample(2.0, 60.0, True) == 3_000  # 6,000 tokens over 2 s
    assert w.peak == 3_000 and w.over and w.cpu_max == 60.0
    for t in range(3, 10):  # no more tokens: the window (5 s) forgets the burst, the peak stays
        w.sample(float(t), 1.0, True)
    assert w.rate == 0 and w.peak == 3_000


def test_a_row_is_over_on_its_rate_or_on_a_saturated_cpu_when_the_client_is_suspect():
    wire = {"rate": 0, "peak": 900.0, "ceiling": 1_000, "source": "built-in", "cpu_max": 95.0}
    assert not row("local", wire, 90.0, suspect=False)["over"]
    saturated = row("local", wire, 90.0, suspect=True)
    assert saturated["over"] and "CPU 95%" in saturated["why"]
    over = row("worker 1", {**wire, "peak": 1_500.0}, 90.0, suspect=False)
    assert over["over"] and over["peak_tokens_per_s"] == 1_500 and over["ceiling_tokens_per_s"] == 1_000
    assert summary_line([over]).startswith("over ceiling: worker 1: peak 1,500 tokens/s over the ceiling of 1,000")
    assert summary_line([row("local", wire, 90.0, suspect=False)]) is None


def test_workers_auto_plans_with_the_calibrated_ceiling(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    settings = derive.resolve(None, _cli("-u", "100", "--stream-rate", "100"))
    assert ceiling() == (TOKENS_PER_PROCESS, "built-in")
    assert choose(settings, cores=8)[0] == 0  # 10,000 tokens/s: one process at the built-in 14,000
    _calibrated(tmp_path, 2_500)
    assert calibration_path() == tmp_path / "llm-locust" / "calibration.json"
    n, why = choose(settings, cores=8)
    assert n == 4 and f"~2,500 tokens/s (calibrated, {calibration_path()})" in why


@pytest.mark.parametrize("text", ["{", '{"tokens_per_process": 0}', '{"other": 1}', "[]"])
def test_an_unreadable_calibration_falls_back_to_the_built_in_and_says_why(tmp_path, monkeypatch, text):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    calibration_path().parent.mkdir(parents=True)
    calibration_path().write_text(text)
    value, source = ceiling()
    assert value == TOKENS_PER_PROCESS and source.startswith("built-in; ") and "unreadable" in source


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_process_over_its_ceiling_says_so_live_and_in_the_results(tmp_path, workers):
    """A ceiling of 50 tokens/s (calibrated): 4 streams of the simulator's read far more. The local
    process (or each worker, through the master) says so once while running, the summary names
    it, and the results carry the flag and each process's peak against the ceiling."""
    _calibrated(tmp_path, 50)
    results = tmp_path / "r.json"
    p = run_ok(
        *("--host", "", "-u", "4", "-r", "4", "-t", "5s", "--max-tokens", "20", "--workers", workers),
        *("--results", results),
        env={"XDG_CONFIG_HOME": str(tmp_path)},
    )
    said = p.stdout + p.stderr
    live = [line for line in said.splitlines() if "over what one process holds (50 tokens/s, calibrated" in line]
    names = ["local"] if workers == "0" else ["worker 0", "worker 1"]
    assert len(live) == len(names), said[-3000:]  # once per process
    assert "over ceiling: " in said
    validity = json.loads(results.read_text())["validity"]
    assert "over_ceiling" in validity["flags"]
    rows = validity["ceiling"]
    assert [r["process"] for r in rows] == names
    for r in rows:
        assert r["over"] and r["peak_tokens_per_s"] > 50 and r["ceiling_tokens_per_s"] == 50
        assert r["ceiling_source"].startswith("calibrated, ")


def test_a_process_under_its_ceiling_is_not_flagged(tmp_path):
    results = tmp_path / "r.json"
    p = run_ok("--host", "", "-u", "2", "-t", "3s", "--max-tokens", "10", "--workers", "0", "--results", results)
    assert "over what one process holds" not in p.stdout + p.stderr
    validity = json.loads(results.read_text())["validity"]
    assert "over_ceiling" not in validity["flags"]
    (local,) = validity["ceiling"]
    assert local["process"] == "local" and not local["over"] and local["ceiling_source"] == "built-in"
    assert 0 < local["peak_tokens_per_s"] < TOKENS_PER_PROCESS


def test_the_live_line_says_a_rate_over_the_ceiling_or_a_saturated_cpu_while_suspect():
    wire = {"rate": 800.0, "peak": 900.0, "ceiling": 1_000, "source": "built-in", "cpu_max": 95.0}
    asked = []

    def suspect(answer):
        return lambda: asked.append(answer) or answer

    assert live_reason("worker 1", {**wire, "cpu_max": 50.0}, 90.0, suspect(True)) is None
    assert asked == []  # the figures are read only when the CPU is saturated
    assert live_reason("worker 1", wire, 90.0, suspect(False)) is None
    cpu = live_reason("worker 1", wire, 90.0, suspect(True))
    assert cpu.startswith("worker 1's CPU reached 95% while the client's figures are suspect")
    rate = live_reason("local", {**wire, "peak": 1_200.0}, 90.0, suspect(False))
    assert rate.startswith("local reads 1,200 tokens/s, over what one process holds (1,000 tokens/s, built-in)")


def test_the_exporter_has_each_process_rate_ceiling_and_over():
    from types import SimpleNamespace

    from llm_locust.runtime.exporter import _ceiling_families

    watch = CeilingWatch(1_000, "built-in")
    watch.sample(0.0, 10.0, True)
    watch.add_tokens(3_000)
    watch.sample(1.0, 10.0, True)
    local = {f.name: f.samples for f in _ceiling_families(SimpleNamespace(ceiling=watch), master=False)}
    rates = [(s.labels, s.value) for s in local["llm_locust_process_tokens_per_second"]]
    assert rates == [({"process": "local"}, 3_000)]
    assert local["llm_locust_process_ceiling_tokens_per_second"][0].value == 1_000
    assert local["llm_locust_process_over_ceiling"][0].value == 1
    workers = {
        "a": SimpleNamespace(index=0, client_id="a", ceiling={"rate": 5.0, "peak": 9.0, "ceiling": 1_000}),
        "b": SimpleNamespace(index=1, client_id="b", ceiling=None),  # no report yet: no sample
    }
    fams = {f.name: f.samples for f in _ceiling_families(SimpleNamespace(workers=workers), master=True)}
    assert [(s.labels, s.value) for s in fams["llm_locust_process_over_ceiling"]] == [({"process": "0"}, 0)]

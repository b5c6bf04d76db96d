"""`llm-locust run --repeat N`: the 95% t-interval, a real repeated run against the simulator,
compare's noise verdict and its regression mode on synthetic repeated results, bad input."""

import json
import math
import signal
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from support import Background, cli_process, live

from llm_locust.analysis.repeats import combine, format_repeats, interval, t975, welch
from llm_locust.report import compare as cmp
from llm_locust.report.accounting import count_problems, section_problem
from llm_locust.report.results import SCHEMA, SCHEMA_VERSION
from llm_locust.schema import Figures


def cli(*args, timeout=60):
    """``llm-locust ARGS`` (cli_process) within 60 s unless told."""
    return cli_process(*args, timeout=timeout)


# ---- the interval, by hand ----


def test_t_quantiles_are_the_tables():
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(4) == 2.776 and t975(30) == 2.042
    assert t975(2.9) == 4.303  # Welch's fractional dof: floored (conservative)
    assert t975(3.9999999999) == 2.776  # ... but not below a whole number rounding missed
    assert t975(45) == 2.021 and t975(10_000) == 1.960
    with pytest.raises(ValueError):
        t975(0)


def test_interval_n3_and_n5_by_hand():
    a = interval([10.0, 12.0, 14.0])  # mean 12, sd 2, half = 4.303 * 2 / sqrt(3) = 4.96867
    assert a["mean"] == 12.0 and a["sd"] == pytest.approx(2.0)
    assert a["half_width"] == pytest.approx(4.96867, abs=1e-5)
    assert a["ci95"] == pytest.approx([7.03133, 16.96867], abs=1e-5)
    b = interval([1, 2, 3, 4, 5])  # mean 3, sd sqrt(2.5) = 1.58114, half = 2.776 * sqrt(0.5) = 1.96293
    assert b["mean"] == 3.0 and b["sd"] == pytest.approx(1.58114, abs=1e-5)
    assert b["half_width"] == pytest.approx(1.96293, abs=1e-5)
    one = interval([7.0])
    assert one["mean"] == 7.0 and one["ci95"] is None


def test_welch_by_hand():
    # a: mean 12, sd 2, n 3; b: mean 20, sd 2, n 3: se = sqrt(4/3 + 4/3) = 1.63299, t = 4.89898, dof 4
    w = welch(interval([10, 12, 14]), interval([18, 20, 22]))
    assert w["t"] == pytest.approx(4.89898, abs=1e-5) and w["dof"] == pytest.approx(4.0)
    assert w["critical"] == 2.776 and w["differs"] is True
    w2 = welch(interval([10, 12, 14]), interval([11, 13, 15]))  # t = 0.61237: within noise
    assert w2["t"] == pytest.approx(0.61237, abs=1e-5) and w2["differs"] is False


# ---- a real repeated run ----


def test_run_repeat_3_against_the_simulator(tmp_path):
    hook_log = tmp_path / "hooks.txt"
    res = tmp_path / "r.json"
    p = cli(
        "run",
        "--repeat",
        "3",
        "-u",
        "2",
        "-t",
        "2s",
        "--max-tokens",
        "16",
        "--results",
        res,
        "--reset-hook",
        f"echo reset >> {hook_log}",
        timeout=240,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert hook_log.read_text().splitlines() == ["reset"] * 3  # before each repetition
    reps = [json.loads((tmp_path / f"r.rep{k}.json").read_text()) for k in (1, 2, 3)]
    doc = json.loads(res.read_text())
    rep = doc["repeats"]
    assert rep["count"] == 3 and rep["files"] == [str(tmp_path / f"r.rep{k}.json") for k in (1, 2, 3)]
    assert rep["reset"] == f"reset before each repetition by: echo reset >> {hook_log}"
    ttft = [r["summary"]["latency"]["ttft"]["p50"] for r in reps]
    tps = [r["summary"]["output_tokens_per_s"] for r in reps]
    f = rep["figures"]
    assert f["ttft_p50"]["values"] == ttft and f["ttft_p50"]["mean"] == pytest.approx(sum(ttft) / 3)
    assert f["output_tokens_per_s"]["mean"] == pytest.approx(sum(tps) / 3)
    sd = math.sqrt(sum((x - sum(tps) / 3) ** 2 for x in tps) / 2)
    assert f["output_tokens_per_s"]["half_width"] == pytest.approx(4.303 * sd / math.sqrt(3))
    assert doc["summary"]["output_tokens_per_s"] == pytest.approx(sum(tps) / 3)  # the summary holds the means
    s = doc["summary"]  # every count the sum of the repetitions', the latencies' counts too
    assert {k: s[k] for k in COUNTS} == {k: sum(r["summary"][k] for r in reps) for k in COUNTS}
    assert s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s["client_cancelled"] + s["lost"]
    assert s["duration_s"] == pytest.approx(sum(r["summary"]["duration_s"] for r in reps))
    assert s["latency"]["ttft"]["count"] == sum(r["summary"]["latency"]["ttft"]["count"] for r in reps)
    TypeAdapter(Figures).validate_python(s, strict=True)
    assert doc["plan"]["repeat"]["count"] == 3  # `llm-locust run r.json` repeats again
    assert p.stdout.count("repetition ") >= 3 and "95% interval (t, 2 dof)" in p.stdout
    # the HTML report shows the intervals
    out = tmp_path / "r.html"
    assert cli("report", res, "-o", out).returncode == 0
    page = out.read_text()
    assert "Repetitions" in page and "95%" in page and "ttft_p50" in page


def test_without_a_hook_the_report_says_the_state_was_not_reset(tmp_path):
    from llm_locust.analysis.repeats import NOT_RESET, repeats_section

    docs = [_doc({"ttft_p50": v}) for v in (0.1, 0.2)]
    assert repeats_section(docs, ["a", "b"], NOT_RESET)["reset"].startswith("server state was not reset")
    # a figure one repetition lacks (none of its requests succeeded) gets no interval, and is named
    docs.append(_doc({}))
    rep = repeats_section(docs, ["a", "b", "c"], NOT_RESET)
    assert "ttft_p50" not in rep["figures"] and rep["incomplete"] == {"ttft_p50": [3]}
    assert rep["figures"]["output_tokens_per_s"]["n"] == 3
    assert "ttft_p50                 no interval: repetition 3 lacks it" in format_repeats(rep)


def test_a_failing_reset_hook_stops_the_series(tmp_path):
    p = cli("run", "--repeat", "2", "-u", "1", "-t", "1s", "--results", tmp_path / "r.json", "--reset-hook", "exit 7")
    assert p.returncode == 1
    assert "the reset hook exited 7 before repetition 1" in p.stderr
    assert not list(tmp_path.iterdir())


# ---- the combined counts ----


def _counted(sent: int, ok: int, failed: int, cancelled: int, duration: float, ttft: list[float]) -> dict:
    """A repetition's results with its counts: `failed` http errors, TTFT samples `ttft`."""
    doc = _doc({"ttft_p50": sorted(ttft)[len(ttft) // 2], "ttft_p99": max(ttft)})
    s = doc["summary"]
    s.update(
        sent=sent,
        ok=ok,
        failed=failed,
        cancelled=cancelled,
        client_cancelled=0,
        lost=0,
        finished=ok + failed + cancelled,
        outcomes={"ok": ok, "http_error": failed, "cancelled": cancelled},
        causes={"http 500": failed},
        errors={"http_error": {"500 boom": failed}},
        duration_s=duration,
        tokens_out=16 * ok,
    )
    s["latency"]["ttft"].update(count=len(ttft), mean=sum(ttft) / len(ttft), min=min(ttft), max=max(ttft))
    return doc


def test_the_combined_counts_are_the_sums_of_every_repetition():
    """Before: `sent` and `duration_s` and the latency counts were the last repetition's while `ok`
    was summed (sent 34, ok 61: ok > sent); compare printed "requests ok / sent 61 / 34"."""
    docs = [
        _counted(30, 27, 2, 1, 3.0, [0.1, 0.2, 0.3]),
        _counted(34, 30, 4, 0, 3.5, [0.2, 0.4]),
        _counted(9, 4, 0, 5, 1.0, [0.5]),  # the one a signal cut: its counts count all the same
    ]
    s = combine(docs, ["a", "b", "c"], "test", planned=3)["summary"]
    assert (s["sent"], s["ok"], s["failed"], s["cancelled"], s["finished"]) == (73, 61, 6, 6, 73)
    assert s["outcomes"] == {"ok": 61, "http_error": 6, "cancelled": 6} and s["causes"] == {"http 500": 6}
    assert s["errors"] == {"http_error": {"500 boom": 6}}
    assert s["duration_s"] == pytest.approx(7.5) and s["tokens_out"] == 16 * 61
    ttft = s["latency"]["ttft"]
    assert ttft["count"] == 6 and (ttft["min"], ttft["max"]) == (0.1, 0.5)
    assert ttft["mean"] == pytest.approx((0.6 + 0.6 + 0.5) / 6)  # weighted by each repetition's count
    assert ttft["p50"] == pytest.approx((0.2 + 0.4 + 0.5) / 3)  # the headline figure: the repetitions' mean
    assert section_problem(s) is None


def test_combined_counts_that_do_not_add_up_are_told():
    bad = _counted(30, 27, 2, 1, 3.0, [0.1])
    bad["summary"]["sent"] = 40  # 10 requests with no outcome and not lost
    bad["count_problems"] = ["summary: sent 40 != ..."]  # as the writer carried it in the repetition's file
    good = _counted(30, 27, 2, 1, 3.0, [0.1])
    combined = combine([good, bad], ["a", "b"], "test")
    assert count_problems(combined) == [
        "summary: sent 70 != ok 54 + failed 4 + cancelled 2 + client_cancelled 0 + lost 0"
    ]
    assert "count_problems" not in combined  # not the last repetition's: the writer checks the combined anew


def _steady(doc: dict, ramp: int, window: int, drain: int) -> dict:
    """`doc` with a steady window found, holding its requests, and one-run intervals in its summary."""
    doc["steady"] = {
        "headline": "whole run",
        "found": True,
        "reason": None,
        "mode": "closed",
        "target": 2,
        "rule": "in flight within 5%",
        "window": {"start": 1.0, "end": 3.0, "seconds": 2.0, "requests": window},
        "ramp": {"seconds": 0.5, "requests": ramp},
        "drain": {"seconds": 0.5, "requests": drain},
        "figures": None,
        "in_flight": [[1.0, 2.0]],
    }
    doc["summary"]["intervals"] = {"latency": {"ttft": {"p50": {"low": 0.1, "high": 0.2, "rel": 0.3}}}}
    return doc


def test_the_combined_results_keep_no_one_repetitions_steady_window_or_intervals():
    """Before: the combined results kept the last repetition's steady window, whose requests are
    a third of the series' (CI: "steady: ramp 0 + window 31 + drain 0 != finished 91", exit 1), and
    its one-run intervals beside the series' means."""
    docs = [
        _steady(_counted(30, 27, 2, 1, 3.0, [0.1]), 2, 26, 2),
        _steady(_counted(34, 30, 4, 0, 3.5, [0.2]), 1, 32, 1),
    ]
    assert [count_problems(d) for d in docs] == [[], []]
    combined = combine(docs, ["a", "b"], "test")
    assert count_problems(combined) == []
    st = combined["steady"]
    assert not st["found"] and st["reason"].startswith("not assessed") and st["window"] is None
    assert "intervals" not in combined["summary"] and "intervals" in docs[-1]["summary"]


# ---- signals: the repetitions belong to the series ----

COUNTS = ("sent", "ok", "failed", "cancelled", "client_cancelled", "lost", "tokens_out")


@pytest.mark.parametrize(
    "sig, group, code, again",
    [(signal.SIGINT, True, 130, False), (signal.SIGTERM, False, 143, False), (signal.SIGINT, True, 130, True)],
)
def test_a_signal_stops_the_series_and_combines_what_finished(tmp_path, sig, group, code, again):
    """Ctrl-C (SIGINT to the terminal's group) or `kill` (SIGTERM to the parent alone) during
    repetition 2 of 3; `again`: a second Ctrl-C while the repetition stops, passed on to it (it says
    so and goes on writing). Before: SIGTERM killed the parent at once (rc -15, nothing combined)
    while the repetition kept sending load; Ctrl-C stopped the repetition, then the next one ran."""
    run = Background(tmp_path, "--repeat", "3", "-u", "2", "-t", "20s", "--max-tokens", "16", "--results", "r.json")
    run.wait_for("repetition 1/3:", timeout=90)
    run.wait_for("All users spawned", count=2)  # repetition 2 sends load
    assert run.descendants()  # the repetition and its simulator
    run.signal(sig, group)
    if again:
        run.wait_for("stopping the run")  # the repetition's own line: it stops
        run.signal(sig, group)
    rc, out, err = run.finish(timeout=90)
    assert rc == code, err[-3000:]
    assert live(run.pids) == []  # no repetition or simulator left behind
    assert ("SIGINT again: already stopping" in err) is again
    assert "Traceback" not in err and "repetition 3/3" not in out and not (tmp_path / "r.rep3.json").exists()
    assert f"INTERRUPTED by {sig.name} (repetition 2 of 3): 2 of 3 repetitions combined" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["run"]["interrupted"]["signal"] == sig.name and doc["run"]["interrupted"]["phase"] == "repetition 2 of 3"
    assert doc["gates"] == [] and doc["repeats"]["count"] == 2 and doc["repeats"]["planned"] == 3
    reps = [json.loads((tmp_path / f"r.rep{k}.json").read_text()) for k in (1, 2)]
    assert reps[1]["run"]["interrupted"]["signal"] == sig.name  # the repetition stopped as a run does
    s = doc["summary"]
    assert {k: s[k] for k in COUNTS} == {k: sum(r["summary"][k] for r in reps) for k in COUNTS}
    assert s["sent"] == s["ok"] + s["failed"] + s["cancelled"] + s["client_cancelled"] + s["lost"] > 0


def test_a_killed_series_takes_its_repetition_with_it(tmp_path):
    """SIGKILL to the parent (nothing can be forwarded): the repetition gets SIGTERM from the
    kernel (PR_SET_PDEATHSIG), stops as on any SIGTERM (its results marked), and its simulator goes."""
    run = Background(tmp_path, "--repeat", "3", "-u", "2", "-t", "60s", "--max-tokens", "16", "--results", "r.json")
    run.wait_for("All users spawned", timeout=90)
    assert len(run.descendants()) >= 2
    run.signal(signal.SIGKILL)
    run.finish(timeout=30)
    deadline = time.monotonic() + 30
    while live(run.pids) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling for the processes to end, within the deadline
    assert live(run.pids) == []
    rep = json.loads((tmp_path / "r.rep1.json").read_text())
    assert rep["run"]["interrupted"]["signal"] == "SIGTERM" and rep["summary"]["duration_s"] < 50


@pytest.mark.timing  # beside the slow tier's shards it ran past run.finish's 60 s in 2 of 3 fresh-clone CIs
def test_a_repetition_killed_on_its_own_stops_the_series_with_a_line(tmp_path):
    """SIGKILL to the repetition (not the parent): no results, so the series stops, says how the
    repetition ended and exits 1. Before: "exited -9" and exit status 247 (sys.exit(-9))."""
    run = Background(tmp_path, "--repeat", "3", "-u", "2", "-t", "60s", "--max-tokens", "16", "--results", "r.json")
    run.wait_for("All users spawned", timeout=90)
    run.descendants()
    import psutil

    (repetition,) = psutil.Process(run.proc.pid).children()
    repetition.kill()
    rc, out, err = run.finish(timeout=60)
    assert rc == 1, err[-3000:]
    assert "llm-locust: repetition 1/3 was killed by SIGKILL without results" in err
    assert "Traceback" not in err and not (tmp_path / "r.rep2.json").exists()
    deadline = time.monotonic() + 30
    while live(run.pids) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling for its simulator to end (SIGTERM from the kernel), within the deadline
    assert live(run.pids) == []


# ---- compare on synthetic repeated results ----


def _doc(figs: dict) -> dict:
    lat = {m: {"count": 10} for m in ("ttft", "itl", "tpot", "e2e")}
    summary = {
        "sent": 10,
        "ok": 10,
        "finished": 10,
        "failed": 0,
        "cancelled": 0,
        "client_cancelled": 0,
        "lost": 0,
        "error_rate": 0.0,
        "latency": lat,
        "client": {"valid": True},
        "length_mismatch": 0,
        "output_tokens_per_s": 1000.0,
        "requests_per_s": 5.0,
    }
    for k, v in figs.items():
        if k.endswith(("_p50", "_p99")):
            m, s = k.rsplit("_", 1)
            lat[m][s] = v
        else:
            summary[k] = v
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "run": {"command": ["llm-locust", "run", "-u", "2"]},
        "summary": summary,
        "validity": {"flags": [], "max_error_rate": 0.05},
        "steps": [],
        "series": [],
    }


def _repeated(path: Path, ttft: list[float], tps: list[float]) -> Path:
    docs = [_doc({"ttft_p50": a, "ttft_p99": 2 * a, "output_tokens_per_s": b}) for a, b in zip(ttft, tps, strict=True)]
    path.write_text(json.dumps(combine(docs, [f"{path}.rep{k}" for k in range(len(docs))], "test")))
    return path


@pytest.fixture
def files(tmp_path):
    base = _repeated(tmp_path / "base.json", [0.100, 0.102, 0.098], [1000, 1010, 990])
    slower = _repeated(tmp_path / "slower.json", [0.150, 0.152, 0.148], [1005, 995, 1000])  # TTFT +50%, beyond noise
    same = _repeated(tmp_path / "same.json", [0.101, 0.099, 0.103], [1002, 992, 1012])
    noisy = _repeated(tmp_path / "noisy.json", [0.080, 0.160, 0.120], [1000, 1000, 1000])  # +20%, within its noise
    slight = _repeated(tmp_path / "slight.json", [0.1020, 0.1021, 0.1019], [1000, 1010, 990])  # +2%, beyond noise
    tight = _repeated(tmp_path / "tight.json", [0.1000, 0.1001, 0.0999], [1000, 1010, 990])
    return {"base": base, "slower": slower, "same": same, "noisy": noisy, "slight": slight, "tight": tight}


def _row(text: str, figure: str) -> str:
    table = text.split("Repetitions (95% intervals)", 1)[1]
    return next(line for line in table.splitlines() if line.startswith(figure + " "))


def test_compare_says_differs_or_within_noise(files, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the table's rows whole on one line each, as read here
    assert cmp.main([str(files["base"]), str(files["slower"])]) == 0
    out = capsys.readouterr().out
    assert _row(out, "ttft_p50").endswith("differs (worse)")
    assert _row(out, "output_tokens_per_s").endswith("within noise")
    assert "100 ms +-4.97 ms" in _row(out, "ttft_p50")  # mean 100, sd 2 ms, n 3
    assert cmp.main([str(files["base"]), str(files["same"])]) == 0
    out = capsys.readouterr().out
    assert _row(out, "ttft_p50").endswith("within noise")
    assert _row(out, "ttft_p99").endswith("within noise")


def _cases(path: Path) -> dict[str, str | None]:
    root = ET.parse(path).getroot()
    return {
        c.get("name"): (c.find("failure").get("message") if c.find("failure") is not None else None)
        for c in root.iter("testcase")
    }


def test_regression_mode_fails_beyond_noise_and_writes_junit(files, tmp_path, capsys):
    junit = tmp_path / "gates.xml"
    code = cmp.main(
        ["--baseline", str(files["base"]), str(files["slower"]), "--tolerance", "5%", "--junit", str(junit)]
    )
    err = capsys.readouterr().err
    assert code == 1
    cases = _cases(junit)
    assert cases["regression: ttft_p50"] is not None and "beyond noise" in cases["regression: ttft_p50"]
    assert "+50.0%" in cases["regression: ttft_p50"]
    assert cases["regression: ttft_p99"] is not None
    assert cases["regression: output_tokens_per_s"] is None  # within noise: passes
    assert "FAIL slower: ttft_p50" in err


def test_regression_within_noise_or_within_tolerance_passes(files, tmp_path, capsys):
    junit = tmp_path / "gates.xml"
    # +20% TTFT, but within the run's noise: a plain 5% tolerance would fail it, the interval does not
    assert cmp.main(["--baseline", str(files["base"]), str(files["noisy"]), "--junit", str(junit)]) == 0
    assert "within noise" in (
        ET.parse(junit).getroot().find(".//testcase[@name='regression: ttft_p50']/system-out").text
    )
    # +2%, beyond noise: passes a 5% tolerance, fails a 1% one
    assert cmp.main(["--baseline", str(files["tight"]), str(files["slight"]), "--tolerance", "5%"]) == 0
    assert (
        cmp.main(["--baseline", str(files["tight"]), str(files["slight"]), "--tolerance", "1%", "--junit", str(junit)])
        == 1
    )
    assert _cases(junit)["regression: ttft_p50"] is not None
    capsys.readouterr()


# ---- bad input ----


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repeat", "0"], "--repeat: Input should be greater than or equal to 1"),
        (["--tolerance", "10%"], "--tolerance: only used with --baseline"),
        (
            ["--repeat", "3", "--junit", "g.xml"],
            "--junit: with --repeat, the JUnit file holds --baseline's regression gate: give one",
        ),
        (
            ["--repeat", "3", "--baseline", "BASE", "--tolerance", "lots"],
            "--tolerance: expected a fraction or a percentage",
        ),
    ],
)
def test_bad_repeat_input_is_a_usage_error(argv, message, files, tmp_path):
    argv = [str(files["base"]) if a == "BASE" else a for a in argv]
    p = cli("run", *argv, "--results", tmp_path / "r.json")
    assert p.returncode == 2, p.stderr
    assert message in p.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.rep1.json").exists()


def test_a_plan_says_repeat_count_0_is_refused(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text("repeat:\n  count: 0\n")
    p = cli("run", plan)
    assert p.returncode == 2 and "repeat.count" in p.stderr

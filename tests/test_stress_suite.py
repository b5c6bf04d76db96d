"""`llm-locust suite stress` (issue 39 item 5; docs/stress-suite.md): each case PASS, FAIL or SKIP
with its reason, "nothing to judge" a SKIP, one page for all cases, exit codes by the verdicts,
each case a child of the suite bounded in time, a signal stopping the suite as it stops --repeat."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import support
from support import ROOT, cli_argv, cli_process

from llm_locust.analysis import stress
from llm_locust.analysis.stress import FAIL, PASS, SKIP


def _doc(failed=0, ok=10, causes=None, **extra):
    summary = {
        "sent": ok + failed,
        "finished": ok + failed,
        "ok": ok,
        "failed": failed,
        "causes": causes or ({"http_error": failed} if failed else {}),
        "latency": {"ttft": {"p50": 0.02}},
        **extra.pop("summary", {}),
    }
    return {"summary": summary, **extra}


def _burst(passed=True, base_samples=20):
    return {"passed": passed, "reason": "recovered 3 s after the burst", "base_samples": base_samples}


def test_burst_nothing_to_judge_is_skip_and_a_failed_request_fails_it():
    """The burst verdict alone says FAIL with no baseline; the suite says SKIP. A verdict that
    passes still FAILs the case when a request failed."""
    assert stress.judge_burst(_doc(stability={"burst": _burst(base_samples=0)})).status == SKIP
    assert stress.judge_burst(_doc(stability={})).status == SKIP
    assert stress.judge_burst(_doc(stability={"burst": _burst()})).status == PASS
    v = stress.judge_burst(_doc(failed=3, stability={"burst": _burst()}))
    assert v.status == FAIL and "3 of 13 requests failed (http_error 3)" in v.reason
    assert stress.judge_burst(_doc(stability={"burst": _burst(passed=False)})).status == FAIL


def _steps(*rows):
    return {
        "ladder": {
            "steps": [{"step": k, "offered": r, "latency": {"ttft": {"p50": p}}} for k, (r, p) in enumerate(rows, 1)]
        }
    }


def test_swings_judge_every_base_step_against_the_first():
    ok = stress.judge_swings("zigzag", _doc(**_steps((1, 0.02), (6, 0.5), (1, 0.025), (6, 0.4), (1, 0.029))))
    assert ok.status == PASS, ok.reason
    late = stress.judge_swings("zigzag", _doc(**_steps((1, 0.02), (6, 0.5), (1, 0.031), (6, 0.4), (1, 0.02))))
    assert late.status == FAIL and "step 3's TTFT p50 31.0 ms" in late.reason
    one = stress.judge_swings("microburst", _doc(**_steps((2, 0.02), (16, 0.5), (2, None))))
    assert one.status == SKIP and "nothing to judge" in one.reason
    assert stress.judge_swings("zigzag", _doc(failed=1, **_steps((1, 0.02), (6, 0.5), (1, 0.02)))).status == FAIL


def test_churn_without_a_cancel_is_skip():
    assert stress.judge_churn(_doc(summary={"client_cancelled": 0})).status == SKIP
    assert stress.judge_churn(_doc(summary={"client_cancelled": 5})).status == PASS
    assert stress.judge_churn(_doc(failed=2, summary={"client_cancelled": 5})).status == FAIL
    assert stress.judge_churn(_doc(ok=0, summary={"client_cancelled": 5})).status == FAIL


def test_long_context_skips_on_a_short_context_or_every_request_refused_overlong():
    v = stress.context_skip(80_016, 65_536, "/v1/models")
    assert v is not None and v.status == SKIP and "65,536 tokens" in v.reason and "80,016" in v.reason
    assert stress.context_skip(80_016, 131_072, "/v1/models") is None
    assert stress.context_skip(80_016, None, "/v1/models") is None  # says none: run it, the refusals tell
    refused = stress.judge_long_context(_doc(ok=0, failed=4, causes={"overlong": 4}), 80_016)
    assert refused.status == SKIP and "overlong" in refused.reason
    other = stress.judge_long_context(_doc(ok=0, failed=4, causes={"overlong": 2, "timeout": 2}), 80_016)
    assert other.status == FAIL
    assert stress.judge_long_context(_doc(), 80_016).status == PASS


def test_soak_too_short_is_skip_not_fail():
    one = {"windows": 1, "passed": False, "reason": "1 window(s) of 10 s: too short to measure a drift"}
    assert stress.judge_soak(_doc(stability={"soak": one})).status == SKIP
    good = {"windows": 5, "passed": True, "reason": "no drift", "error_bursts": []}
    assert stress.judge_soak(_doc(stability={"soak": good})).status == PASS
    assert stress.judge_soak(_doc(failed=1, stability={"soak": good})).status == FAIL
    assert stress.exit_status([stress.Verdict("a", PASS, ""), stress.Verdict("b", SKIP, "")]) == 0
    assert stress.exit_status([stress.Verdict("a", PASS, ""), stress.Verdict("b", FAIL, "")]) == 1


@pytest.mark.slow
def test_a_child_past_its_time_limit_is_stopped_and_said(capsys):
    """Children.run(limit_s=...): SIGTERM at the limit, `over_limit` set; the series goes on."""
    from llm_locust.children import Children

    t0 = time.monotonic()
    with Children(grace_s=5) as children:
        code = children.run([sys.executable, "-c", "import time; time.sleep(60)"], phase="a sleeper", limit_s=1)
        assert children.over_limit and code == -signal.SIGTERM
        assert children.run([sys.executable, "-c", "pass"], phase="the next") == 0
        assert not children.over_limit
    assert time.monotonic() - t0 < 30
    assert "a sleeper ran past its time limit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, said",
    [
        (["nope"], "unknown suite 'nope'"),
        (["stress", "--cases", "burst,nope"], "unknown case nope"),
        (["stress", "--sim-fault", "http500=2"], "rate must be within [0, 1]"),
        (["stress", "--sim-fault", "bogus=0.1"], "bad fault spec"),
        (["stress", "--host", "http://127.0.0.1:9", "--sim-fault", "http500=0.1"], "with --host there is none"),
        (["stress", "--plans", "/nonexistent"], "no burst.yaml"),
    ],
)
def test_bad_usage_is_refused_before_any_case_runs(tmp_path, args, said):
    p = cli_process("suite", *args, "--out", tmp_path / "out", timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert said in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()  # nothing written, nothing started


def test_an_output_folder_that_is_a_link_or_a_file_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("keep")
    for out in ("link", "file"):
        p = cli_process("suite", "stress", "--cases", "churn", "--out", tmp_path / out, timeout=60)
        assert p.returncode == 2 and "not a folder" in p.stderr, p.stderr
    assert list((tmp_path / "real").iterdir()) == [] and (tmp_path / "file").read_text() == "keep"


CHROMIUM = "/usr/bin/chromium"


def _chromium() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        path = None
    if not path:
        support.missing("the report test needs chromium and playwright")
    return str(path)


@pytest.mark.timing
def test_the_suite_gives_pass_fail_and_skip_on_the_simulator_and_one_page_in_chromium(tmp_path):
    """The Done-when of issue 39 item 5, on three cases (the whole suite is ~4 minutes): a fault
    injected into churn FAILs it (exit 1), the simulator's 65,536-token context SKIPs the
    long-context case from /v1/models before it runs, microburst PASSes; one page holds them all
    and opens in headless Chromium."""
    out = tmp_path / "suite"
    t0 = time.monotonic()
    p = cli_process(
        "suite",
        "stress",
        "--cases",
        "microburst,churn,long-context",
        "--sim-fault",
        "churn:http500=0.3",
        "--out",
        out,
        timeout=300,
    )
    assert p.returncode == 1, (p.stdout[-3000:], p.stderr[-3000:])
    doc = json.loads((out / "suite.json").read_text())
    got = {r["case"]: r for r in doc["cases"]}
    assert {k: r["status"] for k, r in got.items()} == {"microburst": PASS, "churn": FAIL, "long-context": SKIP}, got
    assert "requests failed (http_error" in got["churn"]["reason"]
    assert got["churn"]["faults"] == ["http500=0.3"] and got["microburst"]["faults"] == []
    assert "context is 65,536 tokens" in got["long-context"]["reason"] and got["long-context"]["code"] is None
    assert not (out / "long-context.json").exists()  # skipped before any load
    assert json.loads((out / "microburst.json").read_text())["summary"]["ok"] > 0
    table = p.stdout[p.stdout.index("case ") :]
    assert "1 PASS, 1 FAIL, 1 SKIP" in table and "churn" in table
    assert time.monotonic() - t0 < 300

    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((out / "report.html").as_uri())
            rows = page.locator("#suite-table tbody tr")
            assert rows.count() == 3
            texts = [rows.nth(i).inner_text() for i in range(3)]
            assert [t.split()[0] for t in texts] == ["microburst", "churn", "long-context"]
            assert "PASS" in texts[0] and "FAIL" in texts[1] and "SKIP" in texts[2]
            assert page.locator("#case-churn .flag").inner_text() == "FAIL"
            link = page.locator("#case-microburst a", has_text="microburst.json")
            assert link.count() == 1 and (out / str(link.get_attribute("href"))).is_file()  # relative, resolves
            assert page.locator("#case-long-context").inner_text().count("65,536") == 1
            assert errors == []
        finally:
            browser.close()


def test_a_signal_stops_the_suite_and_writes_what_finished(tmp_path):
    """SIGTERM while a case runs: that case is stopped (its results marked interrupted), no
    further case starts, suite.json and the page say interrupted, exit 143."""
    out = tmp_path / "suite"
    proc = subprocess.Popen(
        cli_argv("suite", "stress", "--cases", "churn,soak", "--out", out),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        seen = []
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # the first case's Locust has spawned its users: load is running
            seen.append(line)
            if "All users spawned" in line or time.monotonic() > deadline:
                break
        assert any("All users spawned" in s for s in seen), "".join(seen[-20:])
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, rest[-3000:]
    doc = json.loads((out / "suite.json").read_text())
    assert doc["interrupted"]["signal"] == "SIGTERM"
    assert [r["case"] for r in doc["cases"]] == ["churn"] and doc["planned"] == ["churn", "soak"]
    assert doc["cases"][0]["status"] == SKIP and "interrupted" in doc["cases"][0]["reason"]
    assert not (out / "soak.json").exists()  # no further case started
    assert "INTERRUPTED by SIGTERM" in (out / "report.html").read_text()
    cut = json.loads((out / "churn.json").read_text())  # the case stopped wrote its results, marked
    assert cut["run"]["interrupted"]["signal"] == "SIGTERM"


def test_the_page_links_each_case_relative_to_itself_and_escapes_reasons(tmp_path):
    """--case-reports' links are relative to the page (the folder can be moved); a reason is text."""
    from llm_locust.report.suite_page import render

    row = {
        "case": "burst",
        "status": FAIL,
        "reason": "<script>x</script>",
        "what": "a burst",
        "seconds": 3.0,
        "results": str(tmp_path / "burst.json"),
        "report": str(tmp_path / "burst.html"),
        "figures": {"ttft_p50": 0.012, "sent": 5},
        "faults": ["http500=0.2"],
    }
    page = render({"cases": [row], "simulator": {"context": 65536}, "planned": ["burst", "soak"]}, base=str(tmp_path))
    assert '<a href="burst.html">burst.html</a>' in page and '<a href="burst.json">' in page
    assert "<script>x" not in page and "&lt;script&gt;x" in page
    assert "ttft_p50 (s)" in page and "http500=0.2" in page and "1 of 2 run: 0 PASS, 1 FAIL, 0 SKIP" in page

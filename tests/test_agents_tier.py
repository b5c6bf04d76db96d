"""Agents under an SLO tier (issue 39 item 1, after AA-AgentPerf): the tier's rule per session, the
per-session tallies across processes, and the search end to end on the simulator against its
closed-form capacity.

The closed form: on the simulator with no prefill cost, an iteration of n running sequences takes
A + B n seconds and every running sequence gets one token per iteration, so each session's output
speed is 1 / (A + B n). N closed-loop agents with no think time keep N sequences running (while
the slots last), so a tier asking V tokens/s per session holds while A + B N <= 1 / V:
N* = floor((1 / V - A) / B). The tier's V is put halfway between two whole agents, so neither
neighbour is within 10% of the limit.
"""

import contextlib
import json
import math
import re
import subprocess
import sys

import pytest
from support import cli_process, run_cli, run_ok

from llm_locust.analysis.agents import Tier, attainment, capacity, parse_tier, session_verdict
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.records import Outcome, RequestRecord
from llm_locust.sim.process import SimProcess

# ---- the tier and its rule ----


def test_parse_tier_and_its_errors():
    t = parse_tier("ttft=2s,speed=20,share=90%")
    assert (t.ttft, t.speed, t.share) == (2.0, 20.0, 0.9)
    assert parse_tier(t.spec()) == t
    assert parse_tier("speed=30,ttft=500ms").share == 0.9  # the default share
    assert parse_tier("ttft=1,speed=5,share=0.5").share == 0.5
    for bad, words in (
        ("ttft=2s", "both ttft= and speed="),
        ("ttft=2s,speed=x", "not a number"),
        ("ttft=2s,speed=20,share=150%", "share"),
        ("ttft=2s,speed=20,color=red", "unexpected"),
        ("ttft=0,speed=20", "above 0"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_tier(bad)


def test_session_verdict_needs_every_slo_and_no_failure():
    tier = Tier(ttft=1.0, speed=20.0)
    # [ok, failed, tokens after the first, seconds first to last token, TTFTs...]
    assert session_verdict([3, 0, 90, 3.0, 0.2, 0.5, 3.0], tier) == (True, None)  # median TTFT 0.5 s
    assert session_verdict([3, 0, 90, 3.0, 0.2, 1.5, 3.0], tier) == (False, "ttft")  # median 1.5 s
    assert session_verdict([2, 0, 90, 5.0, 0.2, 0.2], tier) == (False, "speed")  # 18 tok/s
    assert session_verdict([2, 1, 90, 3.0, 0.2, 0.2], tier) == (False, "failed")
    assert session_verdict([0, 0, 0, 0.0], tier) == (False, "no_ok")
    att = attainment({"a": [1, 0, 40, 1.0, 0.1], "b": [1, 0, 10, 1.0, 0.1], "c": [1, 0, 40, 1.0, 0.1]}, tier)
    assert att["sessions"] == 3 and att["met"] == 2 and att["failed_by"] == {"speed": 1}
    assert not att["ok"] and att["share"] == pytest.approx(2 / 3)
    assert att["session_speed_p50"] == 40 and att["session_ttft_p50_s"] == pytest.approx(0.1)
    assert attainment({"a": [1, 0, 40, 1.0, 0.1]}, Tier(1.0, 20.0, share=1.0))["ok"]
    assert not attainment({}, tier)["ok"]  # no session judged: not met


def test_capacity_per_gpu_and_per_megawatt():
    c = capacity(12, 4, 2800.0, "--gpu-power-w")
    assert c["per_gpu"] == 3 and c["per_megawatt"] == pytest.approx(12 / 0.0028)
    assert "per_megawatt" not in capacity(12, 4, None) and "per_gpu" not in capacity(12, None, None)
    assert capacity(None, 4, 700.0) == {"agents": None}


def _rec(session, t0, ttft, n, tpot, outcome=Outcome.OK):
    times = [t0 + ttft + i * tpot for i in range(n)]
    return RequestRecord(
        request_id=f"{session}-{t0}",
        api="chat",
        t_sched=t0,
        t_sent=t0,
        wall_sent=1000 + t0,
        t_first=t0 + ttft,
        t_end=times[-1],
        chunk_times=times,
        chunk_tokens=[1] * n,
        n_out=n,
        outcome=outcome,
        session=session,
    )


def test_aggregate_tallies_sessions_and_merges_them_across_processes():
    a, b = Aggregate(), Aggregate()
    a.add(_rec("s1", 0.0, 0.1, 11, 0.05))  # 10 tokens after the first in 0.5 s
    b.add(_rec("s1", 1.0, 0.3, 21, 0.05))  # 20 in 1.0 s
    b.add(_rec("s2", 1.0, 0.3, 5, 0.05, outcome=Outcome.TIMEOUT))
    b.add(_rec("s3", 1.0, 0.3, 5, 0.05, outcome=Outcome.CANCELLED))  # a stop's: neither ok nor failed
    a.merge_wire(b.to_wire())
    s1 = a.sessions["s1"]
    assert (
        s1[:2] == [2, 0] and s1[2] == 30 and s1[3] == pytest.approx(1.5) and sorted(s1[4:]) == pytest.approx([0.1, 0.3])
    )
    assert a.sessions["s2"][:2] == [0, 1] and "s3" not in a.sessions  # only cancelled: not judged
    assert session_verdict(s1, Tier(ttft=0.25, speed=19.0)) == (True, None)  # median 0.2 s, 20 tok/s
    assert session_verdict(s1, Tier(ttft=0.25, speed=21.0)) == (False, "speed")


# ---- end to end on the simulator ----

A, B, SLOTS, OUT = 0.01, 0.01, 16, 24  # iteration 10 ms + 10 ms per running sequence; 24 output tokens
HALF = 4.5  # the tier's speed limit sits at 4.5 agents: 1 / (A + B x 4.5) = 18.18 tokens/s


def _trace(tmp_path):
    """A synthetic agentic trace of equal sessions: 6 turns of 24 output tokens, no tool wait."""
    out = tmp_path / "agentic.jsonl"
    p = cli_process(
        "trace",
        "synth",
        "--agentic",
        f"sessions=40,turns=6,first_input=32,new_tokens=16,user_p=0,output={OUT},gap=0,subagent_p=0,rate=0",
        "--out",
        str(out),
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return out


@contextlib.contextmanager
def fake_gpu_sidecar():
    """The GPU sidecar with 2 fake GPUs (its own process), yielding its /metrics URL."""
    p = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.gpu.sidecar", "--fake", "2", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = p.stdout.readline()
        mt = re.fullmatch(r"llm-locust gpu-sidecar listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert mt, (line, p.stderr.read() if p.poll() is not None else "")
        yield mt.group(1) + "/metrics"
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_agents_search_finds_the_simulators_closed_form_capacity(tmp_path):
    speed = 1 / (A + B * HALF)
    analytic = math.floor((1 / speed - A) / B)  # 4 agents
    assert analytic == 4 and analytic <= SLOTS
    trace = _trace(tmp_path)
    results = tmp_path / "r.json"
    with (
        SimProcess(slots=SLOTS, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0) as sim,
        fake_gpu_sidecar() as gpu,
    ):
        p = run_ok(
            "--gpu-metrics",
            gpu,
            "--host",
            sim.url,
            "--trace",
            str(trace),
            "--ladder",
            "sla:concurrency:1..16:5%",
            "--agent-tier",
            f"ttft=2s,speed={speed:.4g},share=90%",
            "--gpus",
            "2",
            "--gpu-power-w",
            "700",
            "--workers",
            "0",
            "--warmup",
            "1",
            "--step-duration",
            "3",
            "--results",
            str(results),
            timeout=240,
        )
    r = json.loads(results.read_text())
    sla = r["ladder"]["sla"]
    agents = sla["agents"]
    print(f"\nanalytic {analytic} agents, found {agents['agents']} in {sla['probes']} probes, {sla['seconds']} s")
    assert sla["answer"] == analytic and agents["agents"] == analytic
    assert agents["per_gpu"] == analytic / 2
    # the sidecar's power over the answer's probe, not --gpu-power-w x --gpus
    row = next(v for v in r["verdicts"]["steps"] if v["step"] == agents["step"])
    assert agents["power_from"] == "gpu sidecar" and agents["power_w"] == row["gpu_power_watts"] != 1400
    assert agents["per_megawatt"] == pytest.approx(analytic / (row["gpu_power_watts"] / 1e6))
    assert "W, gpu sidecar)" in p.stdout
    assert agents["tier"] == {"ttft_s": 2.0, "speed_tokens_per_s": pytest.approx(speed, rel=1e-3), "share": 0.9}
    assert agents["attainment"]["ok"] and agents["attainment"]["sessions"] >= analytic
    broke = [pr for pr in sla["probes_detail"] if pr["level"] == analytic + 1]
    assert broke and not broke[0]["met"] and broke[0]["agents"]["failed_by"].get("speed")
    assert any("agent tier:" in b for b in broke[0]["broken"])  # the tier, not an SLO, broke it
    assert f"{analytic} agents, 2 per GPU" in p.stdout
    from llm_locust.report.html import render

    page = render(r)
    assert "Agents under an SLO tier" in page and f"{analytic} agents, 2 per GPU" in page
    c = cli_process("compare", str(results), str(results), timeout=60)
    assert c.returncode == 0, c.stderr
    row = next(line for line in c.stdout.splitlines() if line.startswith("agents under tier"))
    assert f"{analytic} agents, 2/GPU" in row


def test_agent_tier_without_a_search_is_a_clear_error(tmp_path):
    p = run_cli(
        "--host",
        "http://127.0.0.1:9",
        "--ladder",
        "concurrency:1,2",
        "--agent-tier",
        "ttft=2s,speed=20",
        "--no-preflight",
        "--workers",
        "0",
        timeout=60,
    )
    assert p.returncode == 2 and "--agent-tier counts agents, the probes of a concurrency search" in p.stderr
    assert "Traceback" not in p.stderr
    p = run_cli(
        "--host", "http://127.0.0.1:9", "--ladder", "sla:rate:1..8", "--agent-tier", "ttft=2s,speed=20",
        "--no-preflight", "--workers", "0", timeout=60,
    )  # fmt: skip
    assert p.returncode == 2 and "--agent-tier counts agents" in p.stderr
    p = run_cli("--host", "http://127.0.0.1:9", "--agent-tier", "ttft=2s", "--no-preflight", timeout=60)
    assert p.returncode == 2 and "both ttft= and speed=" in p.stderr + p.stdout and "Traceback" not in p.stderr


def test_the_gpu_sidecars_power_replaces_the_setting():
    from llm_locust.analysis.agents import with_sidecar_power

    a = {**capacity(4, 2, 1400.0, "--gpu-power-w"), "step": 3}
    rows = [{"step": 2, "gpu_power_watts": 900.0}, {"step": 3, "gpu_power_watts": 1000.0}]
    got = with_sidecar_power(a, rows)
    assert got["power_w"] == 1000 and got["power_from"] == "gpu sidecar"
    assert got["per_megawatt"] == pytest.approx(4 / 0.001) and got["per_gpu"] == 2
    assert with_sidecar_power(a, [{"step": 3}]) == a  # no power measured over the answer's probe


def test_agents_search_with_workers_judges_the_tier_on_the_master(tmp_path):
    """Distributed: the workers' session tallies merge on the master, whose controller (renewed as
    the shape test starts) still judges the tier."""
    speed = 1 / (A + B * HALF)
    trace = _trace(tmp_path)
    results = tmp_path / "r.json"
    with SimProcess(slots=SLOTS, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0) as sim:
        run_ok(
            "--host", sim.url, "--trace", str(trace), "--ladder", "sla:concurrency:4..8:5%",
            "--agent-tier", f"ttft=2s,speed={speed:.4g},share=90%", "--workers", "2",
            "--warmup", "1", "--step-duration", "3", "--results", str(results), timeout=240,
        )  # fmt: skip
    sla = json.loads(results.read_text())["ladder"]["sla"]
    assert all("agents" in pr for pr in sla["probes_detail"]), sla["probes_detail"]
    assert sla["answer"] == 4 and sla["agents"]["agents"] == 4
    assert not next(pr for pr in sla["probes_detail"] if pr["level"] == 5)["met"]

"""A real Locust master with 2 real worker processes (ZMQ) against the simulator.

The master's merged percentiles must equal those computed from every raw sample the workers
took (within histogram precision), and every request sent must be accounted for exactly once.
"""

import glob
import json
import re
import subprocess
import sys
import time

import pytest
from support import STREAMING_LOCUSTFILE, Cluster, read_records, run_cli, run_ok

from llm_locust.report.outcome import LATE_S
from llm_locust.sim.process import SimProcess


def exact_percentile(values, p):
    s = sorted(values)
    return s[max(1, int(p * len(s) / 100 + 0.5)) - 1]


def within_hdr(got, want):
    return abs(got - want) <= max(abs(want) * 2e-3, 2e-6)


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    results = tmp / "results.json"
    log = tmp / "records.jsonl"
    with SimProcess(slots=6, iter_base=0.003, iter_per_seq=0.0005) as sim:
        proc = run_cli(
            "--host",
            sim.url,
            "--workers",
            "2",
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            "6s",
            "--max-tokens-cap",
            "40",
            "--results",
            str(results),
            "--record-log",
            str(log),
            "--slo",
            "ttft=0.05",
            timeout=120,
        )
    doc = json.loads(results.read_text())
    gate = next(g for g in doc["gates"] if g["name"] == "slo_attainment")
    assert proc.returncode == (0 if gate["passed"] else 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(glob.glob(f"{log}.worker*"))
    return doc, read_records(log, ".worker*"), files, proc.stdout


def test_the_slo_gate_is_judged_on_the_merged_requests(cluster_run):
    """--slo ttft=50ms over two workers: the attainment the gate reads is the share of the
    answered requests (from both workers' record logs) whose TTFT met it, and the exit code
    follows the gate (1 under --slo-attainment's 95%)."""
    results, raw, _, _ = cluster_run
    answered = [r for r in raw if r["outcome"] not in ("cancelled",)]
    met = [r for r in answered if r["outcome"] == "ok" and r["first"] <= 0.05]
    gate = next(g for g in results["gates"] if g["name"] == "slo_attainment")
    assert gate["line"].startswith(f"SLO attainment {len(met) / len(answered):.1%} ({len(met)} of {len(answered)}")
    assert gate["passed"] == (len(met) / len(answered) >= 0.95)


def test_two_workers_each_sent_requests(cluster_run):
    results, raw, files, _ = cluster_run
    assert len(files) == 2
    assert len(results["workers"]) == 2
    assert all(w["sent"] > 0 for w in results["workers"])


def test_every_request_is_counted_once(cluster_run):
    results, raw, _, _ = cluster_run
    s = results["summary"]
    assert s["sent"] == len(raw) == s["finished"]  # nothing in flight after stop
    assert s["ok"] == sum(1 for r in raw if r["outcome"] == "ok") > 20
    assert s["cancelled"] == sum(1 for r in raw if r["outcome"] == "cancelled")
    assert s["tokens_out"] == sum(r["n_out"] for r in raw if r["outcome"] == "ok")
    assert sum(w["sent"] for w in results["workers"]) == s["sent"]


def test_merged_percentiles_equal_raw_percentiles(cluster_run):
    results, raw, _, _ = cluster_run
    ok = [r for r in raw if r["outcome"] == "ok"]
    samples = {"ttft": [], "e2e": [], "tpot": [], "itl": [], "inter_chunk": []}
    for r in ok:
        samples["ttft"].append(r["first"])
        samples["e2e"].append(r["end"])
        if r["n_out"] >= 2:
            samples["tpot"].append((r["chunks"][-1] - r["first"]) / (r["n_out"] - 1))
        for k in range(1, len(r["chunks"])):
            gap = r["chunks"][k] - r["chunks"][k - 1]
            samples["inter_chunk"].append(gap)
            samples["itl"] += [gap / r["chunk_tokens"][k]] * r["chunk_tokens"][k]
    lat = results["summary"]["latency"]
    for name, values in samples.items():
        assert lat[name]["count"] == len(values), name
        for p in (50, 90, 99):
            got, want = lat[name][f"p{p}"], exact_percentile(values, p)
            assert within_hdr(got, want), (name, p, got, want)
        assert within_hdr(lat[name]["max"], max(values)), name


def test_goodput_and_summary_are_reported(cluster_run):
    results, raw, _, stdout = cluster_run
    ok = [r for r in raw if r["outcome"] == "ok"]
    meeting = [r for r in ok if r["first"] <= 0.05]
    s = results["summary"]
    assert s["goodput_requests_per_s"] * s["duration_s"] == pytest.approx(len(meeting), abs=0.01)
    assert "llm-locust summary" in stdout and "TTFT" in stdout
    assert results["run"]["server"]["model"]  # discovered from /v1/models


def test_a_worker_killed_mid_run_is_reported_lost_and_its_figures_are_kept(tmp_path):
    """Separate master and worker processes (as on several hosts); one worker is SIGKILLed once
    it has reported. The master goes on with the other, and the results say who was lost when."""
    results = tmp_path / "r.json"
    with (
        SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0002) as sim,
        Cluster(
            "--expect-workers",
            "2",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "24s",  # Locust calls a worker missing 3 heartbeats after its kill: time for that after a slow start
            "--host",
            sim.url,
            "--results",
            str(results),
            "--max-tokens-cap",
            "16",
            workers=2,
        ) as cluster,
    ):
        cluster.wait_reported(2)
        cluster.workers[0].kill()
        rc, out = cluster.finish()
    assert rc in (0, 1), out[-3000:]
    r = json.loads(results.read_text())
    lost = [w for w in r["workers"] if w["lost_at"]]
    kept = [w for w in r["workers"] if not w["lost_at"]]
    assert len(lost) == 1 and len(kept) == 1, r["workers"]
    assert lost[0]["sent"] > 0 and lost[0]["finished"] > 0  # what it reported before dying is kept
    assert kept[0]["finished"] > lost[0]["finished"]  # the survivor went on
    s = r["summary"]
    assert s["finished"] == lost[0]["finished"] + kept[0]["finished"]
    assert "lost" in out


def test_a_worker_joining_late_takes_its_share(tmp_path):
    """Master with one worker; a second joins mid-run and gets half the users (a closed loop turns
    Locust's --enable-rebalancing on: it used to get none): its requests are merged like the first
    one's, and the summary says it joined late."""
    results = tmp_path / "r.json"

    def first_reported(text: str) -> bool:  # the first worker has reported requests
        return "llm_locust_worker_report_age_seconds{" in text and 'outcome="ok"} 0.0' not in text

    with (
        SimProcess(slots=16, iter_base=0.003, iter_per_seq=0.0002) as sim,
        Cluster(
            "--expect-workers",
            "1",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "24s",
            "--host",
            sim.url,
            "--results",
            str(results),
            "--max-tokens-cap",
            "16",
            workers=1,
        ) as cluster,
    ):
        cluster.wait_until(first_reported)  # bounded (40 s); the late worker joins either way
        # "late" is a first report over LATE_S after the start, which came before the first worker's
        # report: from here, a worker started at once joined 2 s in on a quiet machine (a fresh CI
        # run's failure), so it starts LATE_S + 1 s after that report
        time.sleep(LATE_S + 1.0)
        cluster.add_worker()
        rc, out = cluster.finish()
    assert rc == 0, out[-3000:]
    r = json.loads(results.read_text())
    assert len(r["workers"]) == 2 and all(w["finished"] > 0 for w in r["workers"]), r["workers"]
    assert r["summary"]["finished"] == sum(w["finished"] for w in r["workers"])
    assert re.search(r"worker \S+ joined \d+ s into the run and took a share of the load", out), out[-3000:]


def test_a_worker_without_its_master_says_so():
    worker = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(STREAMING_LOCUSTFILE), "--worker", "--master-port", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**__import__("os").environ, "LLM_LOCUST_MASTER_WARN_AFTER": "0.5"},
    )
    try:
        line = ""
        for line in worker.stdout:  # read until the warning (or the process ends)
            if "no answer yet from the master" in line:
                break
    finally:
        worker.kill()
        worker.wait(timeout=30)
    assert "no answer yet from the master at 127.0.0.1:1" in line


def test_a_distributed_concurrency_ladder_sends_only_from_its_users(tmp_path):
    """The ladder's locustfile holds the open-loop class beside the streaming users. The master
    used to plan and start an open-loop replay of the whole trace on every worker beside a
    concurrency ladder (a 200-record trace with timestamps 0: 200 requests at once on top of
    1-2 users). At most `level` requests may be in flight at any moment."""
    trace, log, results = tmp_path / "w.jsonl", tmp_path / "records.jsonl", tmp_path / "r.json"
    trace.write_text(
        "".join(json.dumps({"timestamp": 0, "input_tokens": 8, "output_tokens": 6}) + "\n" for _ in range(200))
    )
    with SimProcess(slots=8, iter_base=0.01, iter_per_seq=0.0) as sim:
        proc = run_ok(
            "--host",
            sim.url,
            "--workers",
            "2",
            "--trace",
            str(trace),
            "--ladder",
            "concurrency:1,2",
            "--warmup",
            "0",
            "--step-duration",
            "2",
            "--no-early-stop",
            "--results",
            str(results),
            "--record-log",
            str(log),
            timeout=120,
        )
    assert "replay planned" not in proc.stdout + proc.stderr
    raw = read_records(log, ".worker*")
    assert raw and json.loads(results.read_text())["summary"]["sent"] == len(raw)
    edges = sorted(
        [(r["wall_sent"], 1) for r in raw] + [(r["wall_sent"] + r["end"], -1) for r in raw], key=lambda e: (e[0], e[1])
    )
    in_flight = peak = 0
    for _t, d in edges:
        in_flight += d
        peak = max(peak, in_flight)
    assert peak <= 2, f"{peak} requests in flight at once under a ladder of at most 2 users"


def test_merged_intervals_equal_those_of_the_raw_records(cluster_run):
    """The 95% intervals (docs/metrics.md "Confidence intervals") from the master's merge of its
    two workers' time blocks are those one process would compute from every raw record."""
    from llm_locust.metrics.blocks import Blocks
    from llm_locust.metrics.gaps import gap_samples

    results, raw, _, _ = cluster_run
    blocks = Blocks()
    first_sent = last_end = None
    for r in raw:
        t0 = r["t_sent"]
        t_end = t0 + (r["end"] if r["end"] is not None else 0.0)
        wall_end = t_end + (r["wall_sent"] - t0)
        first_sent = r["wall_sent"] if first_sent is None else min(first_sent, r["wall_sent"])
        last_end = wall_end if last_end is None else max(last_end, wall_end)
        if r["outcome"] == "cancelled":  # cut at the stop: its part in the rates' intervals
            blocks.add_life(wall_end, r["wall_sent"], wall_end, r["n_out"], "cut")
        if r["outcome"] != "ok":
            continue
        blocks.add_life(wall_end, r["wall_sent"], wall_end, r["n_out"], "good" if r["first"] <= 0.05 else "ok")
        lat = {"e2e": round(r["end"] * 1e6), "ttft": round(r["first"] * 1e6)}
        if r["n_out"] >= 2:
            lat["tpot"] = round((r["chunks"][-1] - r["first"]) / (r["n_out"] - 1) * 1e6)
        gaps = gap_samples([t0 + c for c in r["chunks"]], r["chunk_tokens"])
        blocks.add_itl(wall_end, gaps[2], gaps[3])
        blocks.add_ok(wall_end, lat, r["n_out"], good=r["first"] <= 0.05)
    want = blocks.intervals(first_sent, last_end)
    got = results["summary"]["intervals"]
    assert want is not None and got["blocks"] == want["blocks"] >= 5
    for name, iv in want["rates"].items():  # counts by block: exact
        assert got["rates"][name] == pytest.approx(iv, rel=1e-9), name
    for metric in ("ttft", "e2e"):  # whole microseconds as the workers rounded them
        for stat, iv in want["latency"][metric].items():
            assert got["latency"][metric][stat] == pytest.approx(iv, rel=2e-3, abs=2e-6), (metric, stat)

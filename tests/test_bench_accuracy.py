"""The accuracy study's benchmark (benchmarks/bench_accuracy.py, docs/accuracy.md) runs at its
small size and prints the tables the doc is made of: the structure and the sanity of the figures
(errors >= 0 where they are by construction, p50 <= p99 <= p99.9, every ok request joined to the
simulator's token log), never timing values, which depend on the machine."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_accuracy.py"


def ordered(d: dict, lowest: float) -> bool:
    """mean and p50 at or above `lowest`, p50 <= p99 <= p99.9, all finite."""
    vals = [d["mean"], d["p50"], d["p99"], d["p99.9"]]
    return all(math.isfinite(v) for v in vals) and min(vals) >= lowest and d["p50"] <= d["p99"] <= d["p99.9"]


def test_small_study_prints_both_tables(tmp_path):
    out_json, out_md = tmp_path / "acc.json", tmp_path / "acc.md"
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--small", "--json", str(out_json), "--markdown", str(out_md)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = orjson.loads(out_json.read_bytes())
    assert doc["machine"][0].startswith("machine: ")
    rows = doc["rows"]
    assert [(r["client"], r["streams"]) for r in rows] == [("ours", 1), ("ours", 10)]
    for r in rows:
        assert r["joined"] >= 1 and r["skipped"] == 0, r
        assert r["joined"] == r["ttft_err"]["n"] <= r["ok"], r  # every ok request found in the token log
        assert r["arrival_err"]["n"] == 100 * r["joined"] and r["itl_err"]["n"] == 99 * r["joined"], r
        for key in ("ttft_err", "arrival_err", "itl_err"):
            assert ordered(r[key], 0.0), (key, r[key])  # a client reads a token after it was written
        assert ordered(r["true_ttft"], 30.0), r["true_ttft"]  # headers are held 30 ms by the simulator
        assert ordered(r["reported_ttft"], 30.0), r["reported_ttft"]
        assert r["failed"] == 0
    md = out_md.read_text().splitlines()
    heads = [i for i, ln in enumerate(md) if ln.startswith("| streams |")]
    assert len(heads) == 2, md
    for h in heads:
        body = [ln for ln in md[h + 2 : h + 4]]
        assert [ln.split("|")[1].strip() for ln in body] == ["1", "10"], md
        assert all(ln.count("|") == md[h].count("|") for ln in body), md

"""Synthetic workloads: distributions, arrivals, shared prefixes, and the written trace."""

import dataclasses
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from llm_locust.workload import load_trace
from llm_locust.workload.synth import SynthSpec, generate, parse_dist, parse_spec_text, write


def draws(spec, n=20000, column="input_tokens"):
    f = parse_dist(spec, column)
    rng = random.Random(7)
    return [f(rng) for _ in range(n)]


def test_fixed_uniform_normal_lognormal():
    assert set(draws("128", 10)) == {128}
    u = draws("uniform:10:20")
    assert min(u) == 10 and max(u) == 20 and statistics.mean(u) == pytest.approx(15, abs=0.2)
    n = draws("normal:500:50")
    assert statistics.mean(n) == pytest.approx(500, rel=0.01) and statistics.stdev(n) == pytest.approx(50, rel=0.05)
    ln = draws("lognormal:300:200")
    assert statistics.mean(ln) == pytest.approx(300, rel=0.03) and statistics.stdev(ln) == pytest.approx(200, rel=0.1)
    assert min(ln) >= 1


def test_empirical_draws_only_values_of_the_trace(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"input_tokens": v, "output_tokens": 2 * v}) + "\n" for v in (5, 50, 500)))
    assert set(draws(f"empirical:{trace}", 500)) == {5, 50, 500}
    assert set(draws(f"empirical:{trace}", 500, "output_tokens")) == {10, 100, 1000}


@pytest.mark.parametrize("bad", ["0", "uniform:5", "uniform:9:3", "gamma:1:2", "lognormal:-1:2", "abc"])
def test_bad_distributions_are_refused(bad):
    with pytest.raises(ValueError, match="distribution"):
        parse_dist(bad)


def test_arrivals_constant_and_poisson():
    const = generate(SynthSpec(requests=11, rate=5, arrivals="constant"))
    assert [r["timestamp"] for r in const] == pytest.approx([i * 0.2 for i in range(11)])
    pois = generate(SynthSpec(requests=5000, rate=10, arrivals="poisson", seed=3))
    gaps = [b["timestamp"] - a["timestamp"] for a, b in zip(pois, pois[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.1, rel=0.1)  # exponential: std = mean
    assert all(r["timestamp"] == 0 for r in generate(SynthSpec(requests=5)))


def test_same_seed_same_workload_other_seed_other_workload():
    spec = SynthSpec(requests=50, input="uniform:1:1000", output="normal:100:30", rate=3, seed=11)
    assert generate(spec) == generate(spec)
    assert generate(spec) != generate(dataclasses.replace(spec, seed=12))


def test_shared_prefix_is_block_zero_of_every_request():
    rows = generate(SynthSpec(requests=20, input="uniform:100:900", prefix_tokens=64, seed=1))
    seen = set()
    for r in rows:
        assert r["block_size"] == 64 and r["hash_ids"][0] == 0
        assert len(r["hash_ids"]) == -(-r["input_tokens"] // 64)
        rest = set(r["hash_ids"][1:])
        assert not rest & seen  # only the prefix is shared
        seen |= rest


def test_written_trace_replays_the_same_records(tmp_path):
    spec = SynthSpec(requests=30, input="uniform:10:90", output="uniform:5:9", rate=4, prefix_tokens=16, seed=2)
    rows = generate(spec)
    path = tmp_path / "synth.jsonl"
    write(rows, path, spec)
    trace = load_trace(path)
    assert len(trace) == 30
    for i, row in enumerate(rows):
        rec = trace[i]
        assert (rec.arrival, rec.input_tokens, rec.output_tokens) == (
            pytest.approx(row["timestamp"]),
            row["input_tokens"],
            row["output_tokens"],
        )
        assert list(rec.hash_ids) == row["hash_ids"] and rec.block_size == 16
    assert json.loads((tmp_path / "synth.jsonl.spec.json").read_text())["seed"] == 2


def test_spec_text_and_cli(tmp_path):
    assert parse_spec_text("requests=7,input=uniform:1:3,rate=2,prefix-tokens=8") == SynthSpec(
        7, "uniform:1:3", "128", 2.0, "poisson", 8, 0
    )
    with pytest.raises(ValueError, match="keys"):
        parse_spec_text("bogus=1")
    out = tmp_path / "w.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "trace", "synth", "--requests", "12", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and len(out.read_text().splitlines()) == 12
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "trace", "synth", "--input", "nope:1", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "unknown distribution" in p.stderr


def test_existing_out_is_refused_without_force(tmp_path, capsys):
    """`trace synth --out existing.jsonl` overwrote silently while `trace record` needs --force."""
    from llm_locust.workload.synth import main

    out = tmp_path / "keep.jsonl"
    out.write_text('{"timestamp": 0, "input_tokens": 1}\n')
    assert main(["--requests", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"llm-locust trace synth: error: {out} exists and is not empty (use --force to overwrite)\n"
    assert out.read_text() == '{"timestamp": 0, "input_tokens": 1}\n' and not Path(f"{out}.spec.json").exists()
    assert main(["--requests", "3", "--out", str(out), "--force"]) == 0
    assert len(out.read_text().splitlines()) == 3
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert main(["--requests", "2", "--out", str(empty)]) == 0  # an empty file is not a trace to keep
    # through the command line, as the issue reports it
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "trace", "synth", "--out", str(out)], capture_output=True, text=True
    )
    assert p.returncode == 2 and "use --force" in p.stderr and len(out.read_text().splitlines()) == 3
    assert main(["--out", str(tmp_path / "no-such-dir" / "x.jsonl")]) == 1
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["workload.synth", "tools.anonymize", "tools.record_proxy"])
def test_sub_tool_help_and_usage_errors_are_returned(tool, capsys):
    """Each sub-tool's main(argv) returns 0 after --help and 2 on a usage error (no SystemExit)."""
    import importlib

    main = importlib.import_module(f"llm_locust.{tool}").main
    tool = tool.split(".")[1]
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: llm-locust trace ") and "--help" in out
    assert main(["--no-such-option"]) == 2
    assert f"llm-locust trace {tool.replace('_proxy', '')}: error: " in capsys.readouterr().err

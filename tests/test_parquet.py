"""A record log as Parquet (`llm-locust export parquet`), read back with DuckDB as a user would:
every field equal to the JSONL's, the chunk times a list column, a two-worker log one table, and
the TTFT p50 per ladder step from a DuckDB query equal to the results file's (within the HDR
histogram's precision)."""

from __future__ import annotations

import json

import duckdb
import orjson
import pytest
from support import cli_process, read_records, run_cli

from llm_locust.metrics.parquet import COLUMNS


@pytest.fixture(scope="module")
def ladder_log(tmp_path_factory, sims):
    tmp = tmp_path_factory.mktemp("parquet")
    results, log = tmp / "r.json", tmp / "log.jsonl"
    p = run_cli(
        "--host", sims(slots=4).url, "--ladder", "concurrency:1,3", "--step-duration", "3s", "--warmup", "0s",
        "--no-early-stop", "--results", str(results), "--record-log", str(log),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    out = tmp / "log.parquet"
    e = cli_process("export", "parquet", str(log))
    assert e.returncode == 0 and out.is_file(), e.stderr
    return json.loads(results.read_text()), log, out


def test_every_field_reads_back_equal_to_the_jsonl(ladder_log):
    _, log, out = ladder_log
    con = duckdb.connect()
    rel = con.sql(f"select * from '{out}' order by id")
    names = [d[0] for d in rel.description]
    assert names == [c for c, _ in COLUMNS]
    got = {r[0]: dict(zip(names, r, strict=True)) for r in rel.fetchall()}
    want = {r["id"]: r for r in read_records(log)}
    assert got.keys() == want.keys() and len(got) > 10
    assert {k for w in want.values() for k in w} <= set(names)  # every field of the log has its column
    for rid, w in want.items():
        g = got[rid]
        for name, _ in COLUMNS[:-3]:  # server and work (JSON text) and worker checked below
            assert g[name] == w[name], (rid, name)
        for name in ("server", "work"):
            assert (json.loads(g[name]) if g[name] is not None else None) == w[name], (rid, name)
        assert g["worker"] is None
    types = dict(con.sql(f"describe select * from '{out}'").fetchall()[i][:2] for i in range(len(names)))
    assert types["chunks"] == "DOUBLE[]" and types["chunk_tokens"] == "INTEGER[]" and types["first"] == "DOUBLE"


def test_ttft_p50_per_step_from_duckdb_equals_the_results(ladder_log):
    results, _, out = ladder_log
    per_step = dict(
        duckdb.sql(
            f"select step, quantile_disc(first, 0.5) from '{out}' where outcome = 'ok' and step > 0 group by step"
        ).fetchall()
    )
    rows = {r["step"]: r for r in results["steps"] if r["step"] > 0}
    assert per_step.keys() == rows.keys() == {1, 2}
    for step, p50 in per_step.items():
        assert p50 == pytest.approx(rows[step]["latency"]["ttft"]["p50"], rel=0.01), step  # HDR: 3 digits


def test_a_two_worker_log_is_one_table_with_its_workers(tmp_path, sims):
    log = tmp_path / "w.jsonl"
    p = run_cli("--host", sims(slots=4).url, "--workers", "2", "-u", "4", "-t", "3s", "--record-log", str(log))
    assert p.returncode == 0, p.stderr[-3000:]
    e = cli_process("export", "parquet", str(log), "-o", str(tmp_path / "w.parquet"))
    assert e.returncode == 0, e.stderr
    counts = dict(duckdb.sql(f"select worker, count(*) from '{tmp_path / 'w.parquet'}' group by worker").fetchall())
    assert sorted(counts) == [0, 1] and sum(counts.values()) == len(read_records(log))


def test_bad_input_is_one_line_and_nothing_written(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(orjson.dumps({"id": "a"}) + b"\n{not json\n")
    p = cli_process("export", "parquet", str(bad))
    assert p.returncode == 2 and f"{bad}:2: not a record log line" in p.stderr
    assert not (tmp_path / "bad.parquet").exists()
    over = cli_process("export", "parquet", str(bad), "-o", str(bad))
    assert over.returncode == 2 and "overwrite" in over.stderr and bad.read_bytes().startswith(b'{"id"')


def test_the_documented_queries_run_as_written(ladder_log):
    """docs/recording.md's three DuckDB queries, on this log: each runs and returns rows."""
    import re

    from support import ROOT

    _, _, out = ladder_log
    text = (ROOT / "docs" / "recording.md").read_text()
    queries = re.findall(r"```sql\n(.*?)```", text, flags=re.S)
    assert len(queries) == 3
    for q in queries:
        assert duckdb.sql(q.replace("'LOG.parquet'", f"'{out}'")).fetchall(), q

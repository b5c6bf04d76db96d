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

from llm_locust.report.parquet import COLUMNS


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
    p = run_cli("--host", sims(slots=4).url, "--workers", "2", "-u", "4", "-t", "6s", "--record-log", str(log))
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


# ---- hostile files (issue 35, finding 7) ----


def _log_line(k: int = 0, **change) -> bytes:
    """One record log line as a run writes it (recordlog.record_dict), with `change` applied."""
    from llm_locust.metrics.recordlog import record_dict
    from llm_locust.metrics.records import RequestRecord

    t0 = 100.0 + k
    rec = RequestRecord(
        request_id=f"r{k}", api="openai-chat", t_sched=t0, t_sent=t0, wall_sent=1e9 + k, t_first=t0 + 0.05,
        t_end=t0 + 0.5, chunk_times=[t0 + 0.05, t0 + 0.1], chunk_tokens=[1, 1], n_out=2,
    )  # fmt: skip
    return orjson.dumps({**record_dict(rec), **change}) + b"\n"


def test_export_never_writes_through_a_planted_temporary_file(tmp_path):
    """The old writer wrote OUT.tmp, whatever it was: a link planted there had its target
    overwritten with Parquet bytes (exit 0). Now: a new file of a random name, then a rename."""
    import os

    log, out, victim = tmp_path / "log.jsonl", tmp_path / "out.parquet", tmp_path / "victim.txt"
    log.write_bytes(_log_line(0) + _log_line(1))
    victim.write_text("keep me\n")
    (tmp_path / "out.parquet.tmp").symlink_to(victim)
    p = cli_process("export", "parquet", str(log), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "keep me\n"  # old code: the Parquet file
    assert os.readlink(tmp_path / "out.parquet.tmp") == str(victim)
    assert duckdb.sql(f"select count(*) from '{out}'").fetchall() == [(2,)]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["log.jsonl", "out.parquet", "out.parquet.tmp", "victim.txt"]


def _hostile(tmp_path, case: str):
    """(the record log to export, what the error line says) for one hostile record log."""
    import os

    log = tmp_path / "log.jsonl"
    good = _log_line(0)
    lines = {
        "cut": (good + good[:40], f"{log}:2: not a record log line"),
        "not JSON": (good + b"hello\n", f"{log}:2: not a record log line"),
        "a list": (b"[1, 2]\n", f'{log}:1: not a record log line (a JSON object with an "id" is expected)'),
        "text for a number": (_log_line(0, step="two"), f'{log}:1: step: expected a whole number, got "two"'),
        "true for a status": (_log_line(0, status=True), f"{log}:1: status: expected a whole number, got true"),
        "text for the chunks": (_log_line(0, chunks="x"), f'{log}:1: chunks: expected a list, got "x"'),
        "a chunk as text": (_log_line(0, chunks=[0.1, "x"]), f"{log}:1: chunks: item 1: expected a number"),
        "a huge count": (
            good + good[:-2] + b',"n_out":18446744073709551615}\n',
            f"{log}:2: n_out: out of range for int64, got 18446744073709551615",
        ),
        "a huge step": (_log_line(0, step=2**40), f"{log}:1: step: out of range for int32"),
        "NaN": (good[:-2] + b',"first":NaN}\n', f"{log}:1: not a record log line"),
        "an empty file": (b"", f"{log}: no record in this record log"),
    }
    if case in lines:
        log.write_bytes(lines[case][0])
        return log, lines[case][1]
    if case == "a folder":
        log.mkdir()
        return log, f"{log}: it is a folder, not a record log file"
    if case == "a pipe":
        os.mkfifo(log)
        return log, f"{log}: it is a named pipe, not a record log file"
    # a worker's part that is a pipe: the old code waited on it forever
    log.write_bytes(good)
    os.mkfifo(f"{log}.worker0")
    return log, f"{log}.worker0: it is a named pipe, not a record log file"


HOSTILE = [
    "cut", "not JSON", "a list", "text for a number", "true for a status", "text for the chunks", "a chunk as text",
    "a huge count", "a huge step", "NaN", "an empty file", "a folder", "a pipe", "a worker's pipe",
]  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_record_log_is_one_line_naming_file_and_line(tmp_path, case):
    """Each: exit 2, one line naming the file (and line, and field), nothing written (old code: a
    traceback for a list, a huge count and a boolean; pyarrow's words without file or line for a
    wrong type; an empty Parquet file for an empty log; a worker's pipe hung the export)."""
    log, said = _hostile(tmp_path, case)
    out = tmp_path / "out.parquet"
    p = cli_process("export", "parquet", str(log), "-o", str(out), timeout=60)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith(f"llm-locust export: {said}"), p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert not out.exists()
    assert [x for x in tmp_path.iterdir() if x.name.startswith(".out.parquet")] == []  # no temporary left


def test_a_record_log_named_for_another_format_is_refused(tmp_path):
    """--record-log x.parquet wrote JSON lines under a Parquet name; now refused before anything
    starts, saying how to get the Parquet file."""
    p = run_cli("--record-log", str(tmp_path / "x.parquet"), "-t", "1s", timeout=60)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"--record-log: {tmp_path / 'x.parquet'}: a record log is JSON lines, not parquet: name it .jsonl" in (
        p.stderr
    )
    assert "export parquet" in p.stderr and not (tmp_path / "x.parquet").exists()


def test_a_runs_record_log_holds_that_run_only(tmp_path, sims):
    """A record log was appended across runs: one Parquet file held 144 rows for a run of 72.
    An earlier run's log (and a worker part of an earlier run with workers) is replaced: the
    export has exactly this run's requests, and the run says what it removed."""
    log, results = tmp_path / "log.jsonl", tmp_path / "r.json"
    earlier = b"".join(_log_line(k) for k in range(50))
    log.write_bytes(earlier)
    (tmp_path / "log.jsonl.worker3").write_bytes(earlier)
    p = run_cli("--host", sims(slots=4).url, "-u", "2", "-t", "2s", "--record-log", str(log), "--results", str(results))
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"record log {log}: an earlier run's log there, its 2 files (LOG and LOG.workerN), removed" in p.stdout
    sent = json.loads(results.read_text())["summary"]["sent"]
    e = cli_process("export", "parquet", str(log), "-o", str(tmp_path / "log.parquet"))
    assert e.returncode == 0, e.stderr
    rows = duckdb.sql(f"select id, worker from '{tmp_path / 'log.parquet'}'").fetchall()
    assert len(rows) == sent > 0 and not any(rid.startswith("r") and rid[1:].isdigit() for rid, _ in rows)
    assert {w for _, w in rows} == {None} and not (tmp_path / "log.jsonl.worker3").exists()

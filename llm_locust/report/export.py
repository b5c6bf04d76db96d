"""`llm-locust export FORMAT INPUT [-o OUTPUT]`: a run's figures in another tool's format.

    llm-locust export llmd RESULTS.json [-o DIR]   the llm-d Benchmark Report (v0.2.1), one JSON file
                                                   per load point (a ladder's steps), beside RESULTS
                                                   or in DIR: NAME.llmd.json or NAME.llmd-stage-K.json
    llm-locust export parquet LOG.jsonl [-o FILE]  a record log (and its LOG.workerN parts) as one
                                                   Parquet table: LOG.parquet unless -o says

An output is never written over an input or another output (report/files.check_outputs), and
is written whole: a new file of a random name beside it, then a rename (report/files.write_atomic),
never through a link planted there. A record log is data: a line it cannot read, a value of the
wrong type, a part that is not a regular file is one line naming the file and line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llm_locust.report.files import check_outputs, write_atomic
from llm_locust.report.llmd import reports
from llm_locust.report.parquet import parts, write
from llm_locust.report.results import ResultsError, read_results


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust export",
        description=__doc__.split("\n\n", 1)[1].split("\nAn output")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("format", choices=["llmd", "parquet"], help="llmd: the llm-d Benchmark Report v0.2.1; parquet")
    p.add_argument("input", help="llmd: an llm-locust results file; parquet: a record log")
    p.add_argument("-o", "--output", default="", help="llmd: the folder to write in; parquet: the file")
    return p


def llmd(results_path: str, folder: str = "") -> list[Path]:
    """Write the llm-d reports of a results file; their paths."""
    doc = read_results(results_path)
    docs = reports(doc)
    src = Path(results_path)
    where = Path(folder) if folder else src.parent
    stem = src.name[: -len(".json")] if src.name.endswith(".json") else src.name
    ld = doc.get("ladder")
    ladder = bool(ld and ld.get("steps"))  # a ladder's files say their stage, even one
    stages = [d["scenario"]["load"]["standardized"]["stage"] for d in docs]
    names = [f"{stem}.llmd-stage-{k}.json" for k in stages] if ladder else [f"{stem}.llmd.json"]
    paths = [where / n for n in names]
    check_outputs({f"-o ({p.name})": str(p) for p in paths}, {"RESULTS": results_path})
    where.mkdir(parents=True, exist_ok=True)
    for path, d in zip(paths, docs, strict=True):
        write_atomic(path, json.dumps(d, indent=1) + "\n")
    return paths


def parquet(log: str, out: str = "") -> list[Path]:
    """Write a record log as Parquet (report/parquet.py); its path."""
    target = Path(out) if out else Path(log).with_suffix(".parquet")
    check_outputs({"-o": str(target)}, {f"LOG ({p.name})": str(p) for p, _ in parts(log)})
    n = write(log, target)
    print(f"{n} requests")
    return [target]


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        paths = llmd(args.input, args.output) if args.format == "llmd" else parquet(args.input, args.output)
    except (ResultsError, ValueError, OSError) as e:
        print(f"llm-locust export: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(f"written {p}")
    return 0

"""Writing a generated workload to the path the user gave, without overwriting one by accident."""

from __future__ import annotations

import os
import sys

from llm_locust.workload.paths import output_problem


def write_out(writer, rows, out: str, spec, force: bool, prog: str) -> int:
    """`writer(rows, out, spec)` unless `out` exists and is not empty (without --force): 0, or the
    exit status after saying why (2: would overwrite, 1: cannot write)."""
    why = output_problem(out)
    if why is not None:  # --force or not: never through a link, never into a pipe or a device
        print(f"{prog}: error: {out}: {why}; give a file path", file=sys.stderr)
        return 2
    if not force and os.path.exists(out) and (os.path.isdir(out) or os.path.getsize(out) > 0):
        print(f"{prog}: error: {out} exists and is not empty (use --force to overwrite)", file=sys.stderr)
        return 2
    try:
        writer(rows, out, spec)
    except OSError as e:
        print(f"{prog}: error: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0

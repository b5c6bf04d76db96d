"""One send path (runtime/send.py): a trace record sent by a closed-loop user and by the open-loop
dispatcher is built, routed and recorded by the same code, so the two records agree on every field
that is not a time or an id. Two simulators behind the client-side router, round robin: the
endpoint, the model asked for, the trace line, the counts, the server's own facts."""

from __future__ import annotations

import json

from support import read_records, run_ok

# Fields that are times (each send's own) or ids; every other field must be equal.
TIMES_AND_IDS = {
    "id",
    "wall_sent",
    "t_sent",
    "sched",
    "released",
    "written",
    "connect",
    "headers",
    "first",
    "first_content",
    "first_tool",
    "end",
    "first_wait",
    "chunks",
}


def test_a_record_sent_by_a_user_and_by_the_dispatcher_is_recorded_alike(sims, tmp_path):
    a, b = sims(slots=4).url, sims(slots=5).url
    trace = tmp_path / "one.jsonl"
    trace.write_text(json.dumps({"timestamp": 0.0, "input_tokens": 40, "output_tokens": 8}) + "\n")
    common = ("--host", a, "--endpoints", b, "--route", "round-robin", "--trace", str(trace), "--seed", "5")
    closed, replay = tmp_path / "closed.jsonl", tmp_path / "replay.jsonl"
    run_ok(*common, "-u", "1", "-t", "2s", "--record-log", str(closed), "--results", str(tmp_path / "c.json"))
    run_ok(*common, "--replay", "--record-log", str(replay), "--results", str(tmp_path / "r.json"))
    by_user = min(read_records(closed), key=lambda r: r["t_sent"])  # its first: the trace's one record
    (by_dispatcher,) = read_records(replay)
    assert by_user["outcome"] == "ok" and by_user["endpoint"] == a.rstrip("/"), by_user
    assert by_user["model"] and by_user["source"].endswith("one.jsonl:1") and by_user["n_out"] == 8, by_user
    same = {k: v for k, v in by_user.items() if k not in TIMES_AND_IDS}
    assert same == {k: v for k, v in by_dispatcher.items() if k not in TIMES_AND_IDS}
    assert set(by_user) == set(by_dispatcher)

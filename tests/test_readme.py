"""Every command block of the README, run as written: durations shortened, the built-in simulator
as the server the README's `--host http://127.0.0.1:8000` stands for, and `llm-locust` / `locust`
run by this Python. A block fails when one of its commands exits non-zero, writes nothing, or sends
nothing (the README's cluster lines once ran 0 users and exited 0). The suite's own commands (the
README's test command and the fast loop) are CI's to run: they are listed, not run here, and a
command block this file does not know fails the test, so a new README command cannot go untried.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from support import ROOT, free_port

README = ROOT / "README.md"
SHORT = "4s"  # every -t of the README, shortened
TARGET = "http://127.0.0.1:8000"  # what the README calls the server
# the suite itself (scripts/suite.py runs it; CI runs the README's test command)
THE_SUITE = ("python scripts/suite.py",)


def blocks() -> list[list[str]]:
    """The README's fenced blocks of commands (a block whose first line is not a command is prose
    or a layout, not run)."""
    text = README.read_text()
    out = []
    for body in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        lines = [ln for ln in body.splitlines() if ln.strip()]
        if lines and lines[0].split()[0] in ("pip", "llm-locust", "locust", "python", "bash"):
            out.append(lines)
    return out


def commands(line: str) -> list[str]:
    """A README line's commands, without the installs (the test environment has them) and the
    suite's own commands."""
    line = line.split("  #", 1)[0].strip()
    parts = [p.strip() for p in line.split("&&")]
    return [p for p in parts if not p.startswith(("pip install", "bash scripts/real-servers.sh", *THE_SUITE))]


def argv(command: str, host: str, master_port: int = 5557) -> tuple[list[str], bool]:
    """(this Python's argv for a README command, whether it runs in the background); a master and
    its worker on `master_port` (Locust's 5557 is anyone's: other tests' clusters run beside)."""
    background = command.endswith("&")
    words = shlex.split(command.rstrip("& "))
    if "--master" in words:
        words += ["--master-bind-port", str(master_port)]
    if "--worker" in words:
        words += ["--master-port", str(master_port)]
    words = [host if w == TARGET else w for w in words]
    if "-t" in words:
        words[words.index("-t") + 1] = SHORT
    elif words[:2] == ["llm-locust", "run"] and "--worker" not in words:
        words += ["-t", SHORT]  # the main job's default 15 s, shortened
    program = {"llm-locust": ["-m", "llm_locust.cli"], "locust": ["-m", "locust"]}[words[0]]
    return [sys.executable, *program, *words[1:]], background


def test_the_readme_has_the_blocks_this_file_runs():
    runnable = [c for b in blocks() for line in b for c in commands(line)]
    assert runnable, "no command found in the README"
    for c in runnable:
        assert c.split()[0] in ("llm-locust", "locust"), f"a README command this test does not know how to run: {c}"


def sent(out: str) -> int:
    m = re.search(r"requests: sent (\d+)", out)
    assert m, f"no summary in the output:\n{out[-2000:]}"
    return int(m.group(1))


@pytest.mark.parametrize("index", range(len(blocks())))
def test_each_readme_block_runs_as_written(index, tmp_path, sims):
    host = sims(slots=8).url
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for part in ("locustfiles", "plans", "traces"):  # the README's relative paths, from a scratch folder
        (tmp_path / part).symlink_to(ROOT / part)
    background: list[subprocess.Popen] = []
    port = free_port()
    try:
        for line in blocks()[index]:
            for command in commands(line):
                args, in_background = argv(command, host, port)
                if in_background:  # the README's master: its worker is the next line
                    background.append(
                        subprocess.Popen(
                            args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                        )
                    )
                    continue
                p = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
                assert p.returncode == 0, f"{command}\n{p.stderr[-3000:]}"
                if "--worker" not in args:
                    assert sent(p.stdout) > 0, command
        for b in background:
            out, err = b.communicate(timeout=120)
            assert b.returncode == 0, f"{b.args}\n{err[-3000:]}"
            assert sent(out) > 0, f"the master sent nothing: {b.args}"
    finally:
        for b in background:
            if b.poll() is None:
                b.kill()
                b.communicate()
    for written in tmp_path.glob("*.json"):  # what a README command asked to write
        assert json.loads(written.read_text())["summary"]["sent"] > 0, written.name


def test_a_master_without_a_target_refuses_to_start(tmp_path):
    """The README's cluster lines once ran a master without --host: 0 users for the whole run, no
    summary, exit 0. It now says what is missing and exits 2, before any worker is waited for."""
    (tmp_path / "locustfiles").symlink_to(ROOT / "locustfiles")
    args = [sys.executable, "-m", "locust", "-f", "locustfiles/streaming.py", "--master", "--headless", "-u", "4"]
    p = subprocess.run([*args, "-t", "30s"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "llm-locust: no --host: give the server's URL" in p.stderr and "Traceback" not in p.stderr


def test_the_readme_locust_lines_start_their_users_at_once():
    """Issue 35 finding 11: the README's master line had -u 64 and no -r, so Locust ramped at 1
    user/s (its default) while the summary said "closed loop of 64 users" (mean in-flight 12.8 of
    a 5-minute run's 64). Every plain-Locust line that sets -u sets -r too."""
    lines = [c for b in blocks() for line in b for c in commands(line) if c.startswith("locust ")]
    assert lines, "the README has no plain-Locust line any more: drop this test"
    for c in lines:
        words = shlex.split(c.rstrip("& "))
        if "-u" in words:
            users = words[words.index("-u") + 1]
            assert "-r" in words, f"a README line ramps at Locust's 1 user/s: {c}"
            assert words[words.index("-r") + 1] == users, f"a README line starts its users over time: {c}"


def test_a_ramped_closed_loop_says_so_in_its_description():
    """The run's one-line description tells a ramp from a closed loop at full strength."""
    from types import SimpleNamespace

    from llm_locust.report.outcome import describe

    settings = SimpleNamespace(ladder="", speed=1, trace_path="t.jsonl", api="openai-chat")
    ramped = describe(settings, {"mode": "closed", "users": 64, "spawn_rate": 1.0, "run_time": 300}, "h")
    at_once = describe(settings, {"mode": "closed", "users": 64, "spawn_rate": 64.0, "run_time": 300}, "h")
    assert "closed loop of 64 users, started at 1/s over 64 s (-r) for 300 s" in ramped
    assert "started at" not in at_once

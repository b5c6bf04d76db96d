"""What `llm-locust run` hands Locust's processes (settings/handoff.py): one typed object in one
environment variable, read once per process; none under plain `locust -f` (issue 38: the CLI
handed the plugin its command and run-only facts in two loose variables)."""

from __future__ import annotations

import json
import subprocess
import sys

from llm_locust.settings import handoff as ho


def test_a_handoff_reads_back_as_written_and_is_read_once(monkeypatch):
    monkeypatch.delenv(ho.ENV, raising=False)
    ho.handoff.cache_clear()
    assert ho.handoff() is None  # plain `locust -f`
    h = ho.Handoff(["llm-locust", "run", "-u", "2"], {"workers": 2, "sim_started": True, "workers_why": None})
    ho.hand_off(h)
    assert json.loads(ho.os.environ[ho.ENV]) == {"command": h.command, "run_only": h.run_only}
    assert ho.handoff() == h
    monkeypatch.setenv(ho.ENV, ho.Handoff(["other"]).to_env())
    assert ho.handoff() == h  # read once: what this process was started with
    ho.handoff.cache_clear()
    assert ho.handoff() == ho.Handoff(["other"])
    monkeypatch.delenv(ho.ENV)
    ho.handoff.cache_clear()


def test_a_child_process_inherits_the_handoff(monkeypatch):
    """Locust's workers are processes of their own: they read what `run` wrote before starting it."""
    monkeypatch.setenv(ho.ENV, ho.Handoff(["llm-locust", "run"], {"web_keep_open": True}).to_env())
    code = "from llm_locust.settings.handoff import handoff; h = handoff(); print(h.command, h.run_only)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['llm-locust', 'run'] {'web_keep_open': True}"

"""`llm-locust suite stress --host` against real llama-server (docs/stress-suite.md): the cases run
against the host given, the long-context case SKIPs from the server's own context (/props n_ctx),
and a run of prompts past that context is read as refused overlong (SKIP, not FAIL)."""

from __future__ import annotations

import json

from realservers import LlamaServer
from support import cli_process, run_cli

from llm_locust.analysis.stress import PASS, SKIP, judge_long_context


def test_the_suite_against_llama_server_runs_churn_and_skips_long_context(llama_server_bin, tiny_model, tmp_path):
    out = tmp_path / "suite"
    with LlamaServer(tiny_model, binary=llama_server_bin, alias="tiny", slots=4, ctx=4096) as srv:
        p = cli_process(
            "suite", "stress", "--host", srv.url, "--cases", "churn,long-context", "--out", out, timeout=240
        )
        assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
        doc = json.loads((out / "suite.json").read_text())
        got = {r["case"]: r for r in doc["cases"]}
        assert got["churn"]["status"] == PASS, got["churn"]
        assert got["churn"]["figures"]["client_cancelled"] > 0 and got["churn"]["figures"]["failed"] == 0
        # -c 4096 over 4 slots: 1,024 tokens a request, said by /props n_ctx
        assert got["long-context"]["status"] == SKIP and "1,024 tokens" in got["long-context"]["reason"]
        assert doc["host"] == srv.url and doc["simulator"] is None

        # the first refusals: prompts past the context, every one refused and classified overlong
        r = run_cli(
            "plans/stress/long-context.yaml",
            "--host",
            srv.url,
            "--synthetic",
            "requests=20,input=3000,output=16,seed=5",
            "-t",
            "4s",
            "--results",
            tmp_path / "lc.json",
            timeout=120,
        )
        assert (tmp_path / "lc.json").exists(), r.stderr[-2000:]
        v = judge_long_context(json.loads((tmp_path / "lc.json").read_text()), 3016)
        assert v.status == SKIP and "refused every 3,016-token request as overlong" in v.reason, v

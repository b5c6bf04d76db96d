"""The same workload against the real vLLM (CPU build) and the real llama-server, then compared.

    bash scripts/real-servers.sh llama vllm     # once: both servers and the models, cached
    python benchmarks/frameworks_real.py [--out DIR]

Runs one concurrency ladder (1, 2, 4, 8 users; 15 s steps, 3 s warm-up) of a seeded synthetic
workload (400 requests, input uniform 100-600 tokens, output 48) against each server in turn
(SmolLM2-135M, 4 slots each), writes DIR/vllm.json and DIR/llamacpp.json with their HTML
reports, and prints `llm-locust compare` of the two with plans/weights-example.yaml. On a
2-core machine the servers and the load generator share the CPU: expect client_saturated marks.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import realservers as rs  # noqa: E402

WORKLOAD = [
    "--api",
    "openai-chat",
    "--synthetic",
    "requests=400,input=uniform:100:600,output=48,seed=3",
    "--ladder",
    "concurrency:1,2,4,8",
    "--warmup",
    "3",
    "--step-duration",
    "15",
    "--slo",
    "ttft=2,tpot_p50=0.2",
]


def run(url: str, out: Path, name: str) -> None:
    cmd = [
        "llm-locust",
        "run",
        "--host",
        url,
        *WORKLOAD,
        "--tokenizer",
        str(rs.smollm2_tokenizer_dir()),
        "--results",
        str(out / f"{name}.json"),
        "--report",
        str(out / f"{name}.html"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    print(f"== {name}: exit {p.returncode}\n{p.stdout[-3000:]}", flush=True)
    if p.returncode:
        print(p.stderr[-2000:], file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="frameworks-out")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    if None in (
        rs.vllm_python(),
        rs.vllm_model_dir(),
        rs.llama_server_bin(),
        rs.smollm2_gguf(),
        rs.smollm2_tokenizer_dir(),
    ):
        print("run `bash scripts/real-servers.sh llama vllm` first", file=sys.stderr)
        return 2
    with rs.VllmServer(rs.vllm_model_dir(), python=rs.vllm_python(), max_num_seqs=4) as srv:
        run(srv.url, out, "vllm")
    with rs.LlamaServer(rs.smollm2_gguf(), slots=4, ctx=8192, alias="smollm2") as srv:
        run(srv.url, out, "llamacpp")
    return subprocess.call(
        [
            "llm-locust",
            "compare",
            str(out / "vllm.json"),
            str(out / "llamacpp.json"),
            "--weights",
            str(ROOT / "plans" / "weights-example.yaml"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())

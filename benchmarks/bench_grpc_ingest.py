"""gRPC client ingest (--api vllm-grpc) beside openai-completions: output tokens per load CPU-second.

The gRPC adapter cannot be measured on bench_api_ingest.py's nginx streams (nginx serves static
HTTP/1.1 bodies; a gRPC reply is HTTP/2 with trailers), so it streams from h2_burst_server.py
(the gRPC twin of nginx: each reply, 256 one-token chunks then `complete`, written whole) or,
with --server grpcio, from grpc_stream_server.py (a grpcio server: message by message, so the
client wakes once a token), and openai-completions from nginx_stream.py as in bench_api_ingest.py.
Both clients: `python -m llm_locust.cli run --api API --host URL --model bench-model -u U -r U
-t Ns --max-tokens 256 --trace T --results R --no-preflight`, CPU and tokens as in
bench_client_ingest.py (run_ours). The stand-in server is Python and shares this machine's cores,
so the gRPC client may not be saturated; tokens per *client* CPU-second is still its cost.

Run: python benchmarks/bench_grpc_ingest.py [--duration 8] [--users 16] [--repeat 3]
No assertions on timing: this prints figures, it does not judge them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_api_ingest import write_trace  # noqa: E402
from bench_client_ingest import run_ours  # noqa: E402
from nginx_stream import NginxStream, free_port  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--server", choices=("burst", "grpcio"), default="burst")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-grpc-"))
    trace = write_trace(tmp / "trace.jsonl")
    port = free_port()
    script = "h2_burst_server.py" if a.server == "burst" else "grpc_stream_server.py"
    server = subprocess.Popen(
        [sys.executable, str(HERE / script), str(port)], stdout=subprocess.PIPE, text=True, cwd=HERE
    )
    try:
        if server.stdout.readline().split()[:1] != ["ready"]:
            raise SystemExit("the gRPC stand-in server did not start")
        res: dict[str, list[float]] = {"vllm-grpc": [], "openai-completions": []}
        with NginxStream() as srv:
            urls = {"vllm-grpc": f"http://127.0.0.1:{port}", "openai-completions": srv.url}
            for r in range(a.repeat):
                for api in list(urls) if r % 2 == 0 else list(urls)[::-1]:
                    m = run_ours(urls[api], a.users, a.duration, tmp, trace, f"{api}-{r}", api=api)
                    v = m["tokens"] / m["cpu_window"]
                    res[api].append(v)
                    print(
                        f"{api:<20} round {r + 1}: {m['tokens']:>9} tokens, {m['cpu_window']:6.2f} CPU-s "
                        f"({100 * m['cpu_window'] / m['wall_window']:.0f}% of a core), {v:>9,.0f} tokens / CPU-s",
                        flush=True,
                    )
    finally:
        server.terminate()
        server.wait(10)
    g, c = statistics.median(res["vllm-grpc"]), statistics.median(res["openai-completions"])
    print(f"\nmedian tokens per load CPU-s: vllm-grpc {g:,.0f}, openai-completions {c:,.0f}, ratio {g / c:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

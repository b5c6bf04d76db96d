"""Prompt synthesis: length error and build time (llm_locust.workload.prompts).

Measures, over input lengths taken from the Azure 2023 traces (../shared/traces, ContextTokens;
log-normal lengths if the files are absent):
  1. the error of prompts built WITH the tokenizer (goal 0) and of the no-tokenizer
     approximation, both counted by the real tokenizer (completions and chat template);
  2. the calibration constants (tokens per word, chat-template overhead) as measured;
  3. build time per prompt for N = 100, 1k, 8k, 32k (exact, exact with 512-token prefix
     blocks, verify=True, approximation), and the one-off set-up cost of a builder;
  4. with --server: usage.prompt_tokens of a real llama-server vs the built count.

Run:  python benchmarks/bench_prompts.py [--server] [--extra-tokenizer PATH ...]
Needs the SmolLM2 tokenizer dir (scripts/real-servers.sh tokenizer) or --tokenizer PATH;
--server also needs llama-server and the models (scripts/real-servers.sh llama).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout
sys.path.insert(0, str(ROOT / "tests"))  # realservers helpers

import realservers  # noqa: E402

from llm_locust.workload.prompts import PromptBuilder  # noqa: E402
from llm_locust.workload.tokenizer import Tokenizer, load_tokenizer  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"


def trace_lengths(k: int, seed: int, cap: int) -> tuple[list[int], str]:
    r = random.Random(seed)
    out: list[int] = []
    used = []
    for name in ("azure2023_conv.csv", "azure2023_code.csv"):
        f = TRACES / name
        if not f.is_file():
            continue
        with open(f, newline="") as fh:
            vals = [int(row["ContextTokens"]) for row in csv.DictReader(fh) if row.get("ContextTokens")]
        vals = [min(cap, max(1, v)) for v in vals]
        out += r.sample(vals, min(k, len(vals)))
        used.append(f"{name} ({len(vals)} rows)")
    if not out:
        out = [max(1, min(cap, int(r.lognormvariate(6.9, 1.0)))) for _ in range(2 * k)]
        used.append("log-normal(6.9, 1.0) (trace files not found)")
    return out, ", ".join(used)


def count_as_server(tok: Tokenizer, p) -> int:
    if p.messages is not None:
        return tok.count_chat(p.messages)
    return tok.count(p.text, add_special_tokens=True)


def errors(tok: Tokenizer, builder: PromptBuilder, ns: list[int]) -> tuple[float, float, int]:
    """(mean abs error in tokens, mean abs % error, prompts with the exact count)."""
    abs_err, pct, exact = [], [], 0
    for i, n in enumerate(ns):
        c = count_as_server(tok, builder.build(n, key=i))
        abs_err.append(abs(c - n))
        pct.append(abs(c - n) / n)
        exact += c == n
    return statistics.mean(abs_err), 100 * statistics.mean(pct), exact


def per_build_us(fn, reps: int) -> float:
    fn(0)  # warm-up (fills block caches where there are blocks to reuse)
    t = time.perf_counter()
    for i in range(1, reps + 1):
        fn(i)
    return (time.perf_counter() - t) / reps * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tokenizer",
        default=str(realservers.smollm2_tokenizer_dir() or ""),
        help="tokenizer dir or tokenizer.json (default: the SmolLM2 one in the cache)",
    )
    ap.add_argument(
        "--extra-tokenizer",
        action="append",
        default=[],
        help="another tokenizer to measure the approximation against (repeatable)",
    )
    ap.add_argument("--samples", type=int, default=400, help="lengths sampled from each Azure file")
    ap.add_argument("--server", action="store_true", help="also compare with llama-server's usage.prompt_tokens")
    ap.add_argument(
        "--server-model",
        choices=("tiny", "smollm2"),
        default="tiny",
        help="tiny: random weights, same tokenizer as SmolLM2, fast prefill (default)",
    )
    ap.add_argument("--server-samples", type=int, default=30)
    a = ap.parse_args()
    if not a.tokenizer:
        print("no tokenizer: run scripts/real-servers.sh tokenizer or pass --tokenizer", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    tok = load_tokenizer(a.tokenizer)
    print(f"tokenizer: {tok!r} (loaded in {1e3 * (time.perf_counter() - t0):.0f} ms)")
    ns, src = trace_lengths(a.samples, 1, 32768)
    print(
        f"lengths: {len(ns)} from {src}; median {statistics.median(ns):.0f}, "
        f"mean {statistics.mean(ns):.0f}, max {max(ns)}"
    )

    # ---------------------------------------------------------------- 1. length error
    print("\n== length error vs the tokenizer (as the server counts: completions text+specials; chat templated)")
    print(f"{'builder':<40} {'mean abs err':>12} {'MAPE':>8} {'exact':>10}")
    rows = [
        ("exact, completions", PromptBuilder(tok, seed=0)),
        ("exact, chat (template)", PromptBuilder(tok, seed=0, chat=True)),
        ("approximation, completions", PromptBuilder(None, seed=0)),
        ("approximation, chat", PromptBuilder(None, seed=0, chat=True)),
        ("approximation, chat, chat_overhead=8", PromptBuilder(None, seed=0, chat=True, chat_overhead=8)),
    ]
    chat_ns = [n for n in ns if n > 31]
    for name, b in rows:
        use = chat_ns if b.chat else ns
        mae, mape, exact = errors(tok, b, use)
        print(f"{name:<40} {mae:>9.2f} tk {mape:>7.3f}% {exact:>5}/{len(use)}")
    for path in a.extra_tokenizer:
        other = load_tokenizer(path)
        label = Path(path).parent.name if Path(path).name == "tokenizer.json" else Path(path).name
        for name, b in [
            ("approximation, completions", PromptBuilder(None, seed=0)),
            ("exact, completions", PromptBuilder(other, seed=0)),
        ]:
            mae, mape, exact = errors(other, b, ns)
            print(f"{name + ' [' + label + ']':<40} {mae:>9.2f} tk {mape:>7.3f}% {exact:>5}/{len(ns)}")

    # ---------------------------------------------------------------- 2. calibration
    print("\n== calibration, measured")
    approx = PromptBuilder(None, seed=0)
    words = tokens = 0
    for i in range(100):
        text = approx.build(10_000, key=("cal", i)).text
        words += len(text.split())
        tokens += tok.count(text)
    print(f"tokens per word over {words:,} words: {tokens / words:.4f}  (DEFAULT_CALIBRATION)")
    over = [
        tok.count_chat([{"role": "user", "content": c}]) - tok.count(c)
        for c in (approx.build(n).text for n in (1, 10, 100, 1000))
    ]
    print(f"chat template overhead around one user message: {over}  (DEFAULT_CHAT_OVERHEAD)")

    # ---------------------------------------------------------------- 3. build time
    print("\n== build time per prompt (this machine; median of 3 runs)")
    t = time.perf_counter()
    PromptBuilder(tok, seed=0)
    setup_c = time.perf_counter() - t
    t = time.perf_counter()
    PromptBuilder(tok, seed=0, chat=True)
    setup_h = time.perf_counter() - t
    print(f"builder set-up (word filter, self-check): completions {1e3 * setup_c:.0f} ms, chat {1e3 * setup_h:.0f} ms")
    exact = PromptBuilder(tok, seed=0)
    chat = PromptBuilder(tok, seed=0, chat=True)
    verify = PromptBuilder(tok, seed=0, verify=True)
    print(f"{'N':>6} {'exact':>10} {'chat':>10} {'blocks512':>10} {'verify':>10} {'approx':>10} {'encode N':>10}  (us)")
    for n in (100, 1000, 8000, 32000):
        reps = max(5, 20000 // n)
        hids = tuple(range(n // 512 + 1))

        def med(fn, reps=reps):
            return statistics.median(per_build_us(fn, reps) for _ in range(3))

        text = exact.build(n).text
        cols = [
            med(lambda i, n=n: exact.build(n, key=i)),
            med(lambda i, n=n: chat.build(n, key=i)),
            med(lambda i, n=n, hids=hids: exact.build(n, hids, 512, key=i)),
            med(lambda i, n=n: verify.build(n, key=i)),
            med(lambda i, n=n: approx.build(n, key=i)),
            med(lambda i, text=text: tok.count(text)),
        ]
        print(f"{n:>6} " + " ".join(f"{c:>10.0f}" for c in cols))

    # ---------------------------------------------------------------- 4. server
    if a.server:
        server_check(a, tok)
    return 0


def server_check(a, tok: Tokenizer) -> None:
    binary = realservers.llama_server_bin()
    model = realservers.tiny_gguf() if a.server_model == "tiny" else realservers.smollm2_gguf()
    if binary is None or model is None:
        print(f"\n--server: llama-server or model missing; {realservers.PROVISION_HINT}")
        return
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(url, body):
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=600) as r:
            return json.loads(r.read())

    cap = 4000
    ns, _ = trace_lengths(a.server_samples // 2 or 1, 2, cap)
    ns = [n for n in ns if n > 31][: a.server_samples]
    print(
        f"\n== vs llama-server ({model.name}) usage.prompt_tokens, {len(ns)} Azure lengths capped at {cap}, "
        f"median {statistics.median(ns):.0f}"
    )
    builders = [
        ("exact, completions", PromptBuilder(tok, seed=0), "/v1/completions"),
        ("exact, chat", PromptBuilder(tok, seed=0, chat=True), "/v1/chat/completions"),
        ("approximation, completions", PromptBuilder(None, seed=0), "/v1/completions"),
        ("approximation, chat", PromptBuilder(None, seed=0, chat=True), "/v1/chat/completions"),
    ]
    t0 = time.perf_counter()
    with realservers.LlamaServer(model, binary=binary, alias=a.server_model, slots=1, ctx=cap + 64) as srv:
        for name, b, path in builders:
            errs, exact = [], 0
            for i, n in enumerate(ns):
                p = b.build(n, key=("srv", i))
                body = {"max_tokens": 1, **({"messages": p.messages} if p.messages else {"prompt": p.text})}
                got = post(srv.url + path, body)["usage"]["prompt_tokens"]
                errs.append(abs(got - n) / n)
                exact += got == n
            print(f"{name:<28} MAPE {100 * statistics.mean(errs):.3f}%  exact {exact}/{len(ns)}")
    print(f"(server part took {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    raise SystemExit(main())

"""`llm-locust sim` / `python -m llm_locust.sim`: run the simulated inference server."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import stat
import sys

from llm_locust.sim.engine import SimConfig
from llm_locust.sim.server import Options, parse_fault, serve

DEFAULT_PREFIX_CACHE_TOKENS = 1_000_000


def fault_arg(text: str):
    spec, sep, rate = text.rpartition("=")
    if not sep:
        raise argparse.ArgumentTypeError("expected SPEC=RATE, e.g. http500=0.01")
    try:
        fault, r = parse_fault(spec), float(rate)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 <= r <= 1:
        raise argparse.ArgumentTypeError("rate must be within [0, 1]")
    return fault, r


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust sim",
        description=(
            "Simulated OpenAI-compatible LLM server over a continuous-batching model. "
            "Prints 'llm-locust sim listening on http://HOST:PORT' as its first stdout line."
        ),
    )
    d = SimConfig()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    p.add_argument("--model", default="llm-locust-sim", help="served model name")
    p.add_argument("--slots", type=int, default=d.slots, help="batch slots (default %(default)s)")
    p.add_argument("--kv-tokens", type=int, default=d.kv_tokens, help="KV-cache budget in tokens (default %(default)s)")
    p.add_argument(
        "--iter-base", type=float, default=d.iter_base, metavar="A", help="seconds per iteration (default %(default)s)"
    )
    p.add_argument(
        "--iter-per-seq",
        type=float,
        default=d.iter_per_seq,
        metavar="B",
        help="seconds per running sequence (default %(default)s)",
    )
    p.add_argument(
        "--iter-per-prefill-token",
        type=float,
        default=d.iter_per_prefill_token,
        metavar="C",
        help="seconds per prompt token prefilled in the iteration (default %(default)s)",
    )
    p.add_argument(
        "--prefix-cache",
        action="store_true",
        help="a prefix cache: prompt words hashed in chained blocks, LRU; cached tokens are not prefilled "
        "and are reported as each API does (default: off)",
    )
    p.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=None,
        metavar="N",
        help="prefix cache capacity in tokens (implies --prefix-cache; default 1000000)",
    )
    p.add_argument(
        "--cache-block",
        type=int,
        default=d.cache_block,
        metavar="WORDS",
        help="prefix cache block size in tokens (default %(default)s)",
    )
    p.add_argument(
        "--spec-tokens",
        type=int,
        default=0,
        metavar="K",
        help="speculative decoding: K draft tokens per decode step (default 0: off)",
    )
    p.add_argument(
        "--spec-accept",
        type=float,
        default=0.7,
        metavar="P",
        help="probability that one draft token is accepted (seeded; stops at the first rejection; default %(default)s)",
    )
    p.add_argument(
        "--eos-mean",
        type=float,
        default=None,
        metavar="N",
        help="stop early at a random EOS, geometric with mean N tokens (default: off, always max_tokens)",
    )
    p.add_argument("--default-max-tokens", type=int, default=16, help="max_tokens when a request has none (default 16)")
    p.add_argument("--fast", action="store_true", help="no pacing: write every token as fast as possible")
    p.add_argument("--token-log", metavar="PATH", help="append one JSON line per finished request")
    p.add_argument(
        "--fault",
        type=fault_arg,
        action="append",
        default=[],
        metavar="SPEC=RATE",
        help="random fault for RATE of requests: http500, http429, stream_error@K, truncate@K, "
        "stall@K:SECONDS, slow_headers:SECONDS (repeatable)",
    )
    p.add_argument(
        "--graded-set",
        metavar="FILE",
        default=None,
        help="a graded prompt set (JSONL): requests asking one of its questions get its answer (docs/sim.md)",
    )
    p.add_argument(
        "--graded-accuracy",
        type=float,
        default=1.0,
        metavar="P",
        help="with --graded-set: answer right with probability P (seeded), else wrong (default %(default)s)",
    )
    p.add_argument(
        "--preempt",
        action="store_true",
        help="KV held as used (prompt + generated), running sequences preempted (latest admitted first, "
        "recomputed) when their next tokens do not fit; default: prompt + max_tokens reserved at admission",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for EOS and fault draws")
    p.add_argument("--uvloop", action="store_true", help="use uvloop (must be installed)")
    return p


def _file_problem(token_log: str | None, graded_set: str | None) -> str | None:
    """Why the simulator's files cannot be used: the token log is appended to, so never through a
    link or into a pipe or a device; the graded set is read whole, so only a regular file (a pipe
    would be read forever). The simulator imports nothing else of the package, so the rule of
    llm_locust/workload/paths.py is written here again."""
    if token_log:
        try:
            mode = os.lstat(token_log).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            return f"--token-log {token_log}: not a regular file (a link, a pipe, a device or a folder)"
    if graded_set and graded_set != "builtin":
        try:
            regular = stat.S_ISREG(os.stat(graded_set).st_mode)
        except OSError as e:
            return f"--graded-set {graded_set}: {e.strerror or e}"
        if not regular:
            return f"--graded-set {graded_set}: not a regular file (a pipe, a device or a folder)"
    return None


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    cache_tokens = 0
    if a.prefix_cache or a.prefix_cache_tokens is not None:
        cache_tokens = DEFAULT_PREFIX_CACHE_TOKENS if a.prefix_cache_tokens is None else a.prefix_cache_tokens
    cfg = SimConfig(
        a.slots,
        a.kv_tokens,
        a.iter_base,
        a.iter_per_seq,
        a.iter_per_prefill_token,
        prefix_cache_tokens=cache_tokens,
        cache_block=a.cache_block,
        spec_tokens=a.spec_tokens,
        spec_accept=a.spec_accept,
        preempt=a.preempt,
    )
    costs = (cfg.iter_base, cfg.iter_per_seq, cfg.iter_per_prefill_token)
    if cfg.slots < 1 or cfg.kv_tokens < 1 or not all(0 <= c < math.inf for c in costs):  # nan fails too
        build_parser().error("--slots and --kv-tokens must be >= 1, iteration costs >= 0")
    if a.prefix_cache_tokens is not None and a.prefix_cache_tokens < 1 or a.cache_block < 1:
        build_parser().error("--prefix-cache-tokens and --cache-block must be >= 1")
    if a.spec_tokens < 0 or not 0 <= a.spec_accept <= 1:
        build_parser().error("--spec-tokens must be >= 0 and --spec-accept within [0, 1]")
    if not 0 <= a.graded_accuracy <= 1:
        build_parser().error("--graded-accuracy must be within [0, 1]")
    if sum(rate for _, rate in a.fault) > 1:
        build_parser().error("--fault rates must sum to at most 1")
    if a.eos_mean is not None and not a.eos_mean > 0 or a.default_max_tokens < 1 or not 0 <= a.port <= 65535:
        build_parser().error("--eos-mean must be > 0, --default-max-tokens >= 1 and --port within 0-65535")
    problem = _file_problem(a.token_log, a.graded_set)
    if problem:
        build_parser().error(problem)
    opts = Options(
        sim=cfg,
        host=a.host,
        port=a.port,
        model=a.model,
        fast=a.fast,
        eos_mean=a.eos_mean,
        default_max_tokens=a.default_max_tokens,
        token_log=a.token_log,
        faults=a.fault,
        seed=a.seed,
        graded_set=a.graded_set,
        graded_accuracy=a.graded_accuracy,
    )
    if a.uvloop:
        import uvloop

        uvloop.install()
    try:
        asyncio.run(serve(opts))
    except OSError as e:  # e.g. the port is taken
        print(f"llm-locust sim: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a Ctrl-C before the loop's own handler was in place
        return 130
    return 0

"""`llm-locust run | sim`: a thin layer over Locust.

`run` starts the simulated server when no --host is given, then hands the command line to
Locust's own main (headless unless --web), so every Locust option passes through.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources

DEFAULTS = {"users": 8, "spawn_rate": 8.0, "run_time": "15s"}
LOCUSTFILES = {"closed": "closed.py", "replay": "replay.py", "ladder": "ladder.py"}


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llm-locust run",
        usage="llm-locust run [PLAN.yaml] [options]",
        description="Load-test an LLM server (default: the built-in simulator). "
        "Unknown options are passed to Locust and to llm-locust's own options "
        "(e.g. --api, --model, --trace, --ladder, --slo, --results, --csv).",
    )
    p.add_argument("--host", default="", help="server base URL; default: start the simulated server")
    p.add_argument("-f", "--locustfile", default="", help="locustfile; default: by mode (closed loop, --replay, --ladder)")
    p.add_argument("-u", "--users", type=int, default=None, help=f"closed loop: users (default {DEFAULTS['users']})")
    p.add_argument("-r", "--spawn-rate", type=float, default=None)
    p.add_argument("-t", "--run-time", default=None, help=f"closed loop default {DEFAULTS['run_time']}; replays and ladders end by themselves")
    p.add_argument("--replay", action="store_true", help="open-loop replay of the trace at its timestamps (see --speed)")
    p.add_argument("--synthetic", default="", help="synthetic workload, e.g. requests=500,input=uniform:100:900,output=128,rate=4 (written beside --results as a trace)")
    p.add_argument("--workers", type=int, default=0, help="run N local worker processes under a master")
    p.add_argument("--web", action="store_true", help="start Locust's web UI instead of running headless")
    p.add_argument("--sim-slots", type=int, default=8, help="simulator batch slots")
    p.add_argument("--sim-fast", action="store_true", help="simulator without pacing (client throughput tests)")
    return p


def _has(passthrough: list[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in passthrough)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_synthetic(text: str, passthrough: list[str]) -> str:
    """Generate the workload and write it as a trace beside the results (or in a temp dir)."""
    import os
    import tempfile

    from llm_locust.workload.synth import generate, parse_spec_text, write

    spec = parse_spec_text(text)
    results = next((passthrough[i + 1] for i, a in enumerate(passthrough[:-1]) if a == "--results"), "")
    if results:
        path = f"{os.path.splitext(results)[0]}.workload.jsonl"
    else:
        path = os.path.join(tempfile.mkdtemp(prefix="llm-locust-"), "workload.jsonl")
    write(generate(spec), path, spec)
    print(f"synthetic workload written to {path}", flush=True)
    return path


def run(argv: list[str]) -> int:
    import json
    import os

    os.environ["LLM_LOCUST_COMMAND"] = json.dumps(["llm-locust", "run", *argv])  # kept in the results
    plan_path = ""
    if argv and not argv[0].startswith("-") and argv[0].endswith((".yaml", ".yml", ".json")):
        plan_path, argv = argv[0], argv[1:]  # `llm-locust run PLAN.yaml|RESULTS.json [options]`
    args, passthrough = _run_parser().parse_known_args(argv)
    if plan_path:
        from llm_locust.settings.plan import PlanError, load_plan, plan_argv, plan_from_dict

        try:
            if plan_path.endswith(".json"):  # a results file: run its effective plan again
                from llm_locust.report.results import load_results

                data = load_results(plan_path).get("plan")
                if not isinstance(data, dict):
                    raise PlanError(f"{plan_path}: no effective plan in these results")
                plan = plan_from_dict(data, source=plan_path)
            else:
                plan = load_plan(plan_path)
        except (PlanError, OSError, ValueError) as e:
            print(f"llm-locust: {e}", file=sys.stderr)
            return 2
        plan_args, plan_host = plan_argv(plan)
        passthrough = plan_args + passthrough  # later options win: the command line overrides the plan
        args.host = args.host or plan_host
        if "--workers" not in argv:
            args.workers = plan.workers
        if "--sim-slots" not in argv:
            args.sim_slots = plan.sim.slots
    if args.synthetic:
        try:
            passthrough += ["--trace", _write_synthetic(args.synthetic, passthrough)]
        except (ValueError, OSError) as e:
            print(f"llm-locust: {e}", file=sys.stderr)
            return 2
    mode = "ladder" if _has(passthrough, "--ladder") else "replay" if args.replay else "closed"
    locustfile = args.locustfile or str(resources.files("llm_locust.locustfiles") / LOCUSTFILES[mode])
    sim = None
    host = args.host
    if not host:
        from llm_locust.sim.process import SimProcess

        sim = SimProcess(slots=args.sim_slots, fast=args.sim_fast)
        sim.start()
        os.environ["LLM_LOCUST_SIM_SLOTS"] = str(args.sim_slots)
        host = sim.url
        print(f"no --host given: started the simulated server at {host}", flush=True)
        if not _has(passthrough, "--api"):
            passthrough += ["--api", "openai-chat"]
    locust_argv = ["locust", "-f", locustfile, "--host", host, "--only-summary"]
    if mode == "closed":
        locust_argv += [
            "-u", str(args.users or DEFAULTS["users"]),
            "-r", str(args.spawn_rate or args.users or DEFAULTS["spawn_rate"]),
            "-t", args.run_time or DEFAULTS["run_time"],
        ]
    else:
        # one open-loop dispatcher per process; the replay or the ladder ends the test itself
        n = max(args.workers, 1)
        locust_argv += ["-u", str(args.users or n), "-r", str(args.spawn_rate or max(args.users or n, 1))]
        if args.run_time:
            locust_argv += ["-t", args.run_time]
    if args.web:
        locust_argv += ["--autostart", "--autoquit", "10"]
    else:
        locust_argv.append("--headless")
    if args.workers:
        locust_argv += ["--processes", str(args.workers)]
        if not _has(passthrough, "--master-bind-port"):
            port = str(_free_port())  # not Locust's fixed 5557: runs side by side must not collide
            locust_argv += ["--master-bind-port", port, "--master-port", port]
    locust_argv += passthrough
    from locust.main import main as locust_main

    sys.argv = locust_argv
    try:
        locust_main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        if sim is not None:
            sim.stop()
    return code


USAGE = """usage: llm-locust COMMAND ...

  run                load-test a server (default: the built-in simulator)
  sim                start the simulated server
  trace record       record production traffic as a trace (streaming-transparent proxy)
  trace anonymize    turn a trace with text into a length-and-hash-only one
  trace synth        write a synthetic workload as a trace file
  gpu-sidecar        export NVML GPU figures to Prometheus (--fake N without a GPU)
  report RESULTS     write a self-contained HTML report of one run
  compare A B ...    runs side by side and a weighted decision matrix (--weights W.yaml)
"""


def trace(argv: list[str]) -> int:
    # asyncio tools: never import locust (gevent monkey-patching) on these paths
    sub, rest = (argv[0], argv[1:]) if argv else ("", [])
    if sub == "record":
        from llm_locust.workload.record_proxy import main as record_main

        return record_main(rest)
    if sub == "anonymize":
        from llm_locust.workload.anonymize import main as anonymize_main

        return anonymize_main(rest)
    if sub == "synth":
        from llm_locust.workload.synth import main as synth_main

        return synth_main(rest)
    print(f"llm-locust trace: expected record, anonymize or synth, got {sub!r}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        return run(rest)
    if cmd == "sim":
        from llm_locust.sim.cli import main as sim_main

        return sim_main(rest)
    if cmd == "trace":
        return trace(rest)
    if cmd == "report":
        from llm_locust.report.html import main as report_main

        return report_main(rest)
    if cmd == "compare":
        from llm_locust.report.compare import main as compare_main

        return compare_main(rest)
    if cmd == "gpu-sidecar":
        from llm_locust.gpu.sidecar import main as sidecar_main

        return sidecar_main(rest)
    print(f"llm-locust: unknown command {cmd!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

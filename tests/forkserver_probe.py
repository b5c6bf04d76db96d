"""Run by tests/test_forkserver.py through tests/forkserver.py: says what the forked process sees
(one JSON line on stdout), writes a line on stderr, and exits with the status its first argument
gives ("sleep" first: waits that many seconds on gevent's loop before it answers)."""

import json
import os
import sys
import time

import gevent

args = sys.argv[1:]
slept = None
if args and args[0] == "sleep":
    t0 = time.monotonic()
    gevent.sleep(float(args[1]))
    slept = time.monotonic() - t0
    args = args[2:]
print(
    json.dumps(
        {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "cwd": os.getcwd(),
            "path0": sys.path[0],
            "argv": sys.argv[1:],
            "env": {k: os.environ.get(k) for k in ("PROBE_A", "PROBE_B")},
            "preloaded": "locust.main" in sys.modules,
            "loop_lag": time.time() - gevent.get_hub().loop.now(),  # how stale the loop's clock is
            "slept": slept,
        }
    )
)
print("on stderr", file=sys.stderr)
sys.exit(int(args[0]) if args else 0)

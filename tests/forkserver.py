"""The CLI in a process forked from one that has already imported it: the tests' `run_cli`.

Why: a test run of ``llm-locust run`` spends ~1.3 s of CPU importing Locust, gevent, pydantic and
the package before it sends anything. The slow tier started 258 of them (442 of its 881 busy
CPU-seconds, measured on 2026-12-03 by polling /proc through `scripts/suite.py slow`), and that
tier is CPU-bound on 2 cores. Python's own answer is multiprocessing's forkserver; this is the
same idea for a command line: one server per pytest process imports what ``llm-locust run``
imports, then forks a child per call, which sets its argv, environment, working directory and
output files and runs ``python -m llm_locust.cli`` as the interpreter would (runpy, ``__main__``)
and exits the normal way (atexit handlers, non-daemon threads joined).

What stays real: every run is a process of its own, with its own pid, sockets, signals and exit
status, and it talks to real servers; its workers, simulators and repetitions are started as
before (fresh interpreters). What it shares with the other runs is only the import of modules
that read nothing at import time but constants (`llm_locust` reads its environment when it
runs, tests/test_forkserver.py checks the exceptions). Tests that start the CLI in the
background (`start_run`), or check how a fresh interpreter starts (the README's commands),
still start one.

    python tests/forkserver.py SOCKET     # serve: one connection per call

A call: the client sends one JSON line {"argv", "env", "cwd", "out", "err"} (and "module", to
run another than llm_locust.cli: tests/test_forkserver.py's probe); an intermediate
child forks the run and answers {"pid": PID}, then {"rc": EXIT STATUS} (negative: killed by that
signal, as subprocess says it). The server exits when its parent (pytest) is gone.
"""

from __future__ import annotations

import json
import os
import runpy
import socket
import sys

_socket, _fork, _waitpid = socket.socket, os.fork, os.waitpid  # main() takes gevent's originals

PRELOAD = (
    "locust.main",
    "llm_locust.cli",
    "llm_locust.users",
    "llm_locust.runtime.webui",
    "llm_locust.report.summary",
    "llm_locust.report.html",
)


def _run(req: dict) -> int:
    """In the forked child: become ``python -m llm_locust.cli ARGV`` and return its exit status."""
    import gevent.hub

    gevent.hub.reinit()  # the child's own event loop, not a copy of the server's epoll (gevent's fork does this)
    # and its clock now: libev caches the loop's time, last read when the server imported Locust;
    # a timer (Locust's --run-time) set from that stale time fired at once
    gevent.get_hub().loop.update_now()
    out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.path[0] = req["cwd"]  # what `python -m` puts first: the working directory
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra  # what PYTHONPATH would have put after it
    sys.argv = ["llm-locust", *req["argv"]]
    # `python -m` runs the module as __main__ apart from its import under its own name (which its
    # own code may still do): as here, once the preloaded copy is out of the way (runpy warns else)
    module = req.get("module", "llm_locust.cli")
    sys.modules.pop(module, None)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


def _answer(conn: socket.socket, req: dict) -> int | None:
    """The intermediate child: fork the run, say its pid, wait for it, say how it ended. Returns
    the run's exit status in the run (which goes on to exit with it), None here."""
    pid = _fork()
    if pid == 0:
        conn.close()
        return _run(req)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = _waitpid(pid, 0)
    conn.sendall(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    os._exit(0)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def serve(path: str) -> int | None:
    """Accept calls until the parent goes; returns in a forked run with its exit status."""
    parent = os.getppid()
    listener = _socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    listener.settimeout(0.5)
    print("ready", flush=True)
    while os.getppid() == parent:
        _reap()
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        req = json.loads(_read_line(conn))
        sys.stdout.flush()
        sys.stderr.flush()
        if _fork() == 0:
            listener.close()
            return _answer(conn, req)
        conn.close()
    return None


def _reap() -> None:
    """Collect the intermediate children that have ended (SIGCHLD is left as gevent set it: its
    loop, re-created in each run, watches the run's own children with it)."""
    try:
        while _waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def main() -> None:
    global _socket, _fork, _waitpid
    from gevent import monkey

    for name in PRELOAD:
        __import__(name)
    # Locust patched the process with gevent on import: the server's own waits take the blocking
    # originals, so that it never runs gevent's loop (each run re-creates its own, _run)
    _socket = monkey.get_original("socket", "socket")
    _fork = monkey.get_original("os", "fork")
    _waitpid = monkey.get_original("os", "waitpid")
    code = serve(sys.argv[1])
    if code is not None:
        sys.exit(code)


if __name__ == "__main__":
    main()

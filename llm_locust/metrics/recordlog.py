"""Optional raw log: one JSON line per finished request, for audits and ground-truth checks.

A run's record log starts fresh, as its results file does: before any load the run checks the
log and its workers' parts (LOG.workerN) as it checks every output (report.files.check_outputs)
and removes an earlier run's (`start_fresh`), and each process empties the file it opens first.
The tests of one process (the web UI's Start, again) append to it. A name that says another
format (LOG.parquet, LOG.gz) is refused: the log is JSON lines; `llm-locust export parquet` makes
the Parquet file.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import stat

import orjson

from llm_locust.metrics.records import RequestRecord

log = logging.getLogger(__name__)
BUFFER_BYTES = 1 << 16  # lines are written in blocks of about this size
FAILED: list[RecordLog] = []  # the logs of this process that could not write every record
STARTED: set[str] = set()  # the logs this process began (emptied at its first open); later tests append
OTHER_FORMATS = (".parquet", ".pq", ".arrow", ".feather", ".csv", ".gz", ".zst", ".bz2", ".xz", ".zip")
_WORKER_RE = re.compile(r"\.worker(\d+)$")


def name_problem(path: str) -> str | None:
    """Why a record log may not have this name (None: it may): the file is JSON lines, one per
    request, and a name that says another format would hold JSON lines under it."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in OTHER_FORMATS:
        return None
    return (
        f"{path}: a record log is JSON lines, not {suffix[1:]}: name it .jsonl "
        f"(llm-locust export parquet LOG.jsonl writes the Parquet file)"
    )


def earlier_parts(path: str) -> dict[int, str]:
    """{N: LOG.workerN} of the files beside LOG (before this run's load: an earlier run's)."""
    found = {}
    for p in glob.glob(glob.escape(path) + ".worker*"):
        m = _WORKER_RE.search(p)
        if m:
            found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def outputs(path: str, workers: int) -> dict[str, str]:
    """The files this run's record log may write and the earlier parts it replaces, beside LOG
    itself (report.files.run_files has it), by label, for check_outputs: LOG.worker0 ..
    LOG.worker{workers-1} (the local worker processes) and every LOG.workerN already there."""
    if not path:
        return {}
    parts = {k: f"{path}.worker{k}" for k in range(max(workers, 0))} | earlier_parts(path)
    return {f"--record-log (worker {k})": p for k, p in sorted(parts.items())}


def start_fresh(path: str) -> str:
    """Before any load, once the outputs are checked: remove an earlier run's record log (LOG and
    its LOG.workerN parts, regular files only), so that the log holds this run's records and no
    other; the line that says so ("" when there was none)."""
    if not path:
        return ""
    gone = []
    for p in [path, *earlier_parts(path).values()]:
        try:
            if stat.S_ISREG(os.lstat(p).st_mode):
                os.unlink(p)
                gone.append(p)
        except FileNotFoundError:
            continue
    if not gone:
        return ""
    files = "its file" if len(gone) == 1 else f"its {len(gone)} files (LOG and LOG.workerN)"
    return f"record log {path}: an earlier run's log there, {files}, removed: this run's starts fresh"


def record_dict(rec: RequestRecord) -> dict:
    t0 = rec.t_sent
    rel = lambda t: None if t is None else t - t0  # noqa: E731
    return {
        "id": rec.request_id,
        "api": rec.api,
        "step": rec.step,
        "source": rec.source,
        "outcome": rec.outcome.value,
        "status": rec.status,
        "error": rec.error,
        "cause": rec.cause,
        "wall_sent": rec.wall_sent,
        "t_sent": t0,  # perf_counter seconds on the sending worker; the others are relative to it
        "sched": rel(rec.t_sched),
        "released": rel(rec.t_released),  # a send held at --max-in-flight / --max-prefill let go (None: not held)
        "written": rel(rec.t_written),  # the request's bytes written (request phases; None: not timed)
        "connect": rec.connect,  # seconds opening its connection before t_sent (0.0: kept alive)
        "new_connection": rec.new_connection,
        "headers": rel(rec.t_headers),
        "first": rel(rec.t_first),
        "first_content": rel(rec.t_first_content),
        "first_tool": rel(rec.t_first_tool),
        "end": rel(rec.t_end),
        # s the newest data of the read that brought the first token had waited in the socket
        # (None: not measured; client validity, docs/metrics.md)
        "first_wait": rec.first_wait,
        "chunks": [t - t0 for t in rec.chunk_times],
        "chunk_tokens": rec.chunk_tokens,
        "n_out": rec.n_out,
        "n_out_source": rec.n_out_source,
        "n_in": rec.n_in,
        "n_in_source": rec.n_in_source,
        "requested_out": rec.requested_out,
        "finish_reason": rec.finish_reason,
        "n_cached": rec.n_cached,  # prompt tokens the server served from its cache (None: unsaid)
        "ideal_cached": rec.ideal_cached,  # what an unbounded prefix cache could have served (None: unknown)
        "endpoint": rec.endpoint,
        "model": rec.model,
        "session": rec.session,
        "server": rec.extra,  # what the server reported about the request (llama.cpp timings...)
        "work": None if rec.work is None else rec.work.to_dict(),  # the workload's facts (images, graded ...)
    }


class RecordLog:
    """The record log of one process: opened at the first record, so a process that sent nothing
    leaves no file. It never raises into the request path: a write that fails (a full disk, a
    path that is not a regular file) is logged once, the lines already written are kept whole
    (a line cut by the failure is taken back), and every later record is counted as not written
    (`failed`) instead of being written. The run reads `failures()` at its end: a record log that
    lost records is an error of the run, said in one line, not a traceback per request."""

    def __init__(self, path: str, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.path = path
        self.buffer_bytes = buffer_bytes
        self.written = 0  # records in the file, whole lines
        self.failed = 0  # records not written
        self.error: str | None = None  # why, from the first failure on
        self._fd: int | None = None
        self._size = 0  # the file's size after the last whole block written
        self._buf = bytearray()
        self._pending = 0  # records in _buf

    def write(self, rec: RequestRecord) -> None:
        if self.error is not None:
            self.failed += 1
            return
        try:
            line = orjson.dumps(record_dict(rec)) + b"\n"
        except (TypeError, orjson.JSONEncodeError) as e:  # a value JSON cannot hold: this record only
            self.failed += 1
            log.warning("record log %s: request %s not written: %s", self.path, rec.request_id, e)
            return
        self._buf += line
        self._pending += 1
        if len(self._buf) >= self.buffer_bytes:
            self._flush()

    def _open(self) -> int:
        """O_APPEND, never through a symbolic link, never a device or a pipe (O_NONBLOCK: opening
        a pipe nobody reads fails instead of waiting); emptied at this process's first open of it
        (a worker on another machine starts fresh too), appended to by its later tests."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        key = os.path.abspath(self.path)
        if key not in STARTED:
            flags |= os.O_TRUNC
        try:
            fd = os.open(self.path, flags, 0o666)
        except OSError as e:
            if os.path.islink(self.path):
                raise OSError(e.errno, "a symbolic link, not a regular file") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError("not a regular file (a device, a pipe, a socket or a folder)")
        STARTED.add(key)
        self._size = st.st_size
        return fd

    def _flush(self) -> None:
        if not self._buf:
            return
        try:
            if self._fd is None:
                self._fd = self._open()
            view = memoryview(self._buf)
            while view:
                view = view[os.write(self._fd, view) :]
            self._size += len(self._buf)
            self.written += self._pending
        except OSError as e:
            self._fail(e)
        finally:
            self._buf = bytearray()
            self._pending = 0

    def _fail(self, e: OSError) -> None:
        """The first failed write: cut the file back to its last whole line, count what is lost."""
        self.failed += self._pending
        self.error = e.strerror or str(e)
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            self._close_fd()
        FAILED.append(self)
        log.error(
            "record log %s: cannot write (%s): it keeps its first %d records, whole lines; the rest of "
            "this run's records are counted, not written",
            self.path,
            self.error,
            self.written,
        )

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        """Write what is buffered and close; never raises (a failure is counted, see `write`)."""
        self._flush()
        self._close_fd()

    def problem(self) -> str | None:
        """One line for the end of the run when records were lost, else None."""
        if not self.failed:
            return None
        total = self.written + self.failed
        return (
            f"the record log {self.path} lost {self.failed:,} of {total:,} records ({self.error}); "
            f"it holds the first {self.written:,}, whole lines"
        )


def failures() -> list[str]:
    """One line per record log of this process that lost records (for the run's end and exit)."""
    return [line for lg in FAILED if (line := lg.problem()) is not None]

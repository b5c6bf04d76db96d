"""The paths every command reads and writes, checked the same way before it opens them: a regular
file, or a refusal in one line that names the file and says what it is.

A named pipe would be read forever (its writer may never come), a device such as /dev/zero or
/dev/urandom would be read until memory runs out, and a folder cannot be read at all: each used
to hang a command, end it in a traceback, or be called "no such file". A symbolic link to a
regular file is read: following a link is what the user asked for when they named it. An output is
another matter: a link, a pipe or a device is never written (`output_problem`; report/files.py
adds the checks against a run's inputs and other outputs), since writing through a link writes a
file the user did not name, and replacing it removes the link.

Core code, the lowest package that reads files (workload), so the settings (plans), the tools
(trace anonymize, synth) and the report (results, record logs) share it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputError(ValueError):
    """An input that is not a regular file, in one line (exit 2 at the command line)."""


def input_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as an input file (None: a regular file, or a link to one)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    if stat.S_ISREG(st.st_mode):
        return None
    for test, words in _KINDS:
        if test(st.st_mode):
            return f"it is {words}, not a regular file"
    return "it is not a regular file"


def check_input(path: str | Path, label: str = "") -> None:
    """Raise InputError ("LABEL PATH: why") unless `path` is a regular file to read."""
    why = input_problem(path)
    if why is not None:
        raise InputError(f"{label + ' ' if label else ''}{path}: {why}")


def output_kind(path: str | Path) -> str | None:
    """What `path` is when it must not be written as a file, in words ("a named pipe", "a symbolic
    link (to x)"); None: absent, or a regular file. A symbolic link counts, whatever it points to:
    writing beside it and renaming would replace the link, writing through it would write
    somewhere the user did not name."""
    try:
        st = os.lstat(path)
    except OSError:  # absent, or its folder cannot be read: the write itself says which
        return None
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            return "a symbolic link"
    return next((words for test, words in _KINDS if test(st.st_mode)), "not a regular file")


def output_problem(path: str | Path) -> str | None:
    """Why `path` must not be written as a file (None: absent, or a regular file)."""
    kind = output_kind(path)
    if kind is None:
        return None
    return "it is not a regular file" if kind == "not a regular file" else f"it is {kind}, not a regular file"


def trace_file_problem(path: str | Path) -> str:
    """What to say of a trace path that is not a regular file: "no such trace file", or what it is
    (a pipe was once called missing)."""
    why = input_problem(path) or "not a regular file"
    return "no such trace file" if why == "no such file" else why


def read_regular(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of one input file, or InputError naming it: a pipe, a device or a folder (a pipe
    would be read forever), or a file over `limit` bytes (refused unread: its parse would take
    several times its size in memory). Opened without blocking, then judged by what was opened,
    so a path swapped between a check and the read changes nothing. `what`: what the command
    wants there ("a results file"), said in the refusal."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = next((words for test, words in _KINDS if test(st.st_mode)), "not a regular file")
        raise InputError(f"{path}: {kind}, not a regular file: give {what}")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(limit + 1) if st.st_size <= limit else b""
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if st.st_size > limit or len(data) > limit:
        size = max(st.st_size, len(data)) / (1 << 20)
        raise InputError(f"{path}: {size:.1f} MiB, over the {limit >> 20} MiB read of {what}")
    return data

"""Writing the files a run hands around (results, reports, comparisons): whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def check_writable(path: str | Path) -> None:
    """Raise OSError (with the path) unless a file can be written at `path`: a run checks its
    output paths before it sends any load, so a run is never lost for want of a folder."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".check")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OSError(f"cannot write {path}: {e.strerror or e}") from None
    if path.is_dir():
        raise OSError(f"cannot write {path}: it is a folder")


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """A temporary file beside `path`, then os.replace: a reader never sees half a file, and a
    failed write leaves an earlier file at `path` as it was. The mode is the usual one (umask),
    not mkstemp's private 0600: these files are meant to be shared."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

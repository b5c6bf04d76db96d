"""Writing the files a run hands around (results, reports, comparisons, record logs): whole or not
at all, and never over what the run reads.

A run checks its outputs before it sends any load (`check_outputs`): an output that is one of the
run's inputs (the plan, the trace, a baseline), another output, a folder, a device, a pipe or a
symbolic link is refused with one line naming the option, the path and what to do. The writers
refuse the same non-regular paths on their own (`refuse_special`), so a path that became a link or
a device while the run went on is still never replaced.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from llm_locust.safe.masking import mask_data
from llm_locust.settings.model import options
from llm_locust.workload.paths import output_kind

PLAN_SUFFIXES = (".yaml", ".yml", ".json")  # `llm-locust run PLAN` / `llm-locust run RESULTS.json`


def special(path: str | Path) -> str | None:
    """Why `path` must not be written as a file, in words (None: it is absent or a regular file):
    workload.paths.output_kind, the one rule for every output."""
    return output_kind(path)


def refuse_special(path: str | Path) -> None:
    """Raise OSError (one line, with the path) when `path` exists and is not a regular file."""
    why = special(path)
    if why is not None:
        raise OSError(f"{path} is {why}, not a regular file: llm-locust writes only regular files; give a file path")


def check_writable(path: str | Path) -> None:
    """Raise OSError (with the path) unless a file can be written at `path`: a run checks its
    output paths before it sends any load, so a run is never lost for want of a folder."""
    path = Path(path)
    refuse_special(path)
    for folder in path.parents:
        if folder.exists() or folder.is_symlink():
            if not folder.is_dir():
                raise OSError(f"cannot write {path}: {folder} is a file, not a folder")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".check")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OSError(f"cannot write {path}: {e.strerror or e}") from None


def _same(a: str, b: str) -> bool:
    """Whether two paths name the same file: the same inode when both exist (hard links, `./x`,
    symbolic links to it), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _labelled(inputs: Mapping[str, str] | Iterable[str]) -> list[tuple[str, str]]:
    if isinstance(inputs, Mapping):
        return [(k, v) for k, v in inputs.items() if v]
    return [("an input file", v) for v in inputs if v]


def check_outputs(outputs: Mapping[str, str], inputs: Mapping[str, str] | Iterable[str] = ()) -> None:
    """Before any load: raise ValueError (one line: the option, the path, why, what to do) when an
    output (`{"--results": path, ...}`; empty paths skipped) is one of the run's `inputs`
    (`{"--trace": path, ...}` or plain paths) or another output, is not a regular file, or cannot
    be written. A run that went on would end by overwriting what it read, or lose its figures."""
    given = [(opt, path) for opt, path in outputs.items() if path]
    ins = _labelled(inputs)
    for i, (opt, path) in enumerate(given):
        why = special(path)
        if why is not None:
            raise ValueError(
                f"{opt} {path}: it is {why}, not a regular file; the run would replace it: give a file path"
            )
        for label, source in ins:
            if _same(path, source):
                raise ValueError(
                    f"{opt} {path}: that is {label}, which this run reads; writing it would overwrite it: "
                    f"give {opt} another path"
                )
        for other, other_path in given[:i]:
            if _same(path, other_path):
                raise ValueError(
                    f"{opt} {path}: that is also {other}'s path; one would overwrite the other: give each its own path"
                )
        try:
            check_writable(path)
        except OSError as e:
            raise ValueError(f"{opt} {path}: {e}") from None


def plan_path(command: list[str]) -> str:
    """The plan file of `llm-locust run PLAN.yaml|RESULTS.json ...` (the run's first input), or ""."""
    rest = command[2:] if command[:2] == ["llm-locust", "run"] else command[1:]
    first = rest[0] if rest else ""
    return first if first and not first.startswith("-") and first.endswith(PLAN_SUFFIXES) else ""


def run_files(settings: Any, plan: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """(outputs, inputs) of a run, by option, from the settings' own declarations (`Opt.path`
    "out" / "in"); the trace is the one the run loads (the bundled sample when none is given),
    `plan` the plan or results file the run was started from."""
    outputs: dict[str, str] = {}
    inputs: dict[str, str] = {"the plan": plan} if plan else {}
    for name, (_default, opt) in options().items():
        value = getattr(settings, name, "")
        if not isinstance(value, str) or not value:
            continue
        if opt.path == "out":
            outputs[opt.flag_for(name)] = value
        elif opt.path == "in":
            inputs[opt.flag_for(name)] = value
    inputs["--trace"] = getattr(settings, "trace_path", "") or inputs.get("--trace", "")
    graded = getattr(settings, "graded", "")
    if isinstance(graded, str) and graded and os.path.isfile(graded):  # 'builtin' or a file
        inputs["--graded"] = graded
    return outputs, inputs


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """A temporary file beside `path`, flushed to disk, then os.replace: a reader never sees half
    a file, and a failed write (a full disk) leaves an earlier file at `path` as it was and raises
    OSError. A path that is not a regular file (a device, a pipe, a symbolic link, a folder) is
    refused, never replaced. The mode is the usual one (umask), not mkstemp's private 0600: these
    files are meant to be shared. Every file goes out with the process's secrets masked
    (masking.mask_data): this is the one writer of the files a run hands around."""
    path = Path(path)
    refuse_special(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = mask_data(data)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())  # a disk that is full shows here (delayed allocation, NFS), not after
        refuse_special(path)  # became a link or a device while the file was written
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

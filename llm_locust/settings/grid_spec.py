"""`--grid isl=128,1024:osl=128,1024`: the input and output lengths a grid of runs covers.

One option value, axes separated by `:` (or spaces, or `;`), so it is one word on a command line,
one value in `locust.conf` and in the effective plan; a plan may also write the mapping
`grid: {isl: [128, 1024], osl: [128, 1024]}`. Every cell of the product isl x osl is one run of
the plan's ladder or SLA search (llm_locust.grid_runs). Parsed here, in the core, so the settings
check it before anything starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llm_locust.settings import limits as sizes

AXES = ("isl", "osl")
MAX_CELLS = 64  # each cell is a whole ladder run: past this a grid runs for a day
_SPLIT = re.compile(r"[:;\s]+")


@dataclass(frozen=True)
class Grid:
    """The lengths of each axis, in the order given."""

    isl: tuple[int, ...]
    osl: tuple[int, ...]

    def spec(self) -> str:
        """The canonical text, as the settings and the effective plan keep it."""
        return f"isl={','.join(map(str, self.isl))}:osl={','.join(map(str, self.osl))}"

    def cells(self) -> list[tuple[int, int]]:
        """(isl, osl) of each cell, input length first, in the order the grid runs them."""
        return [(i, o) for i in self.isl for o in self.osl]


def cell_name(isl: int, osl: int) -> str:
    """The cell's part of its file names: RESULTS.cell-isl128-osl1024.json."""
    return f"cell-isl{isl}-osl{osl}"


def _lengths(axis: str, text: str) -> tuple[int, ...]:
    """One axis's lengths: whole numbers >= 1, none twice, within the token limit."""
    out: list[int] = []
    for part in text.split(","):
        x = part.strip()
        if not x.isdigit() or int(x) < 1:
            raise ValueError(f"{axis}: expected whole token counts >= 1 separated by commas, got {x!r}")
        n = int(x)
        if n > sizes.MAX_TOKENS:
            raise ValueError(f"{axis}: {n} is more than {sizes.MAX_TOKENS}, the most tokens of one request")
        if n in out:
            raise ValueError(f"{axis}: {n} is given twice")
        out.append(n)
    return tuple(out)


def parse_grid(text: str) -> Grid:
    """`isl=A,B,...:osl=C,D,...` -> Grid; ValueError saying what is wrong and how to write it."""
    found: dict[str, tuple[int, ...]] = {}
    for part in filter(None, _SPLIT.split(text.strip())):
        axis, sep, values = part.partition("=")
        axis = axis.strip().lower()
        if not sep or axis not in AXES:
            raise ValueError(f"bad grid item {part!r}: write isl=LENGTHS:osl=LENGTHS, e.g. isl=128,1024:osl=128,1024")
        if axis in found:
            raise ValueError(f"{axis} is given twice")
        found[axis] = _lengths(axis, values)
    missing = [a for a in AXES if a not in found]
    if missing:
        raise ValueError(f"no {' or '.join(missing)}= lengths: a grid needs both, e.g. isl=128,1024:osl=128")
    grid = Grid(found["isl"], found["osl"])
    n = len(grid.isl) * len(grid.osl)
    if n > MAX_CELLS:
        raise ValueError(f"{n} cells is more than {MAX_CELLS}, the most one grid runs (each cell is a whole ladder)")
    return grid


def grid_text(v: Any) -> Any:
    """A plan's mapping `{isl: [..], osl: [..]}` (lists or comma text) as the one-line form; text
    is checked and written canonically."""
    if isinstance(v, dict):
        unknown = [str(k) for k in v if k not in AXES]
        if unknown:
            raise ValueError(f"unknown grid key {unknown[0]!r}: the keys are isl and osl")
        parts = []
        for axis in AXES:
            x = v.get(axis)
            if isinstance(x, list):
                x = ",".join(str(n) for n in x)
            if x is not None:
                parts.append(f"{axis}={x}")
        v = ":".join(parts)
    if isinstance(v, str) and v.strip():
        return parse_grid(v).spec()
    return v

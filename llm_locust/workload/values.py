"""Values users write, read the same way in every package that reads them: a number of seconds
("500ms", "30s", "2m", "1h") and the "did you mean" hint for a misspelt name.

Here, low in the core (below the analysis and the settings), because the workload's cancel
rules, the analysis's precision targets and the settings all read them.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any


def suggest(word: str, known) -> str:
    """' (did you mean X?)' for the known name nearest `word` (a prefix of it first), or ''."""
    word = str(word)
    close = [k for k in known if word and k.startswith(word)] or difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}


def parse_seconds(value: Any) -> float:
    """A number of seconds, or a string like "500ms", "30s", "2m", "1h". ValueError if not."""
    if isinstance(value, bool):
        raise ValueError(f"expected seconds, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number of seconds, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            return float(m[1]) * _UNITS[m[2]]
    raise ValueError(f"expected seconds (a number, or e.g. 500ms, 30s, 2m), got {value!r}")

"""`llm-locust run`'s command line checked before anything starts, against Locust's own parser.

Every option that is not ours goes to Locust as it is, so an option is known when our parser or
Locust's has it, or a locustfile of the run adds it (`parser.add_argument("--x", ...)` in its
source, read without importing it). Anything else is refused here, with a did-you-mean over both
sets, before the simulator or Locust starts (`--userz 4` used to start the simulator, then fail
under Locust's name 3 s later). Neither parser takes abbreviations: `--sl` is not `--slo`.

Locust's parser is built (locust.argument_parser.get_parser), never copied: a Locust upgrade's
options are known as they are. Importing it imports Locust (and gevent's monkey-patching), so
it is built only when there is something to check or help to print.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path
from typing import Any

# Locust's options that `llm-locust run --help` lists (their help read from Locust's parser): those
# the README and docs use with `llm-locust run`
LOCUST_SHOWN = (
    "--web-host",
    "--web-port",
    "--web-login",
    "--autostart",
    "--csv",
    "--html",
    "--loglevel",
    "--logfile",
    "--stop-timeout",
    "--expect-workers",
    "--master",
    "--worker",
    "--master-host",
    "--master-port",
    "--tags",
    "--exclude-tags",
)
# where `llm-locust run` gives one of them another default than Locust's
OUR_DEFAULTS = {"--web-host": "127.0.0.1 (llm-locust run; plain Locust: every interface)"}
_NUMBER = re.compile(r"^-?[0-9.]+(?:[eE][-+]?[0-9]+)?$")
_DEFAULT_SENTENCE = re.compile(r"\s*Defaults? (?:is|to) .*?(?:\.(?=\s|$)|$)")


class UnknownOption(ValueError):
    """An option neither llm-locust nor Locust (nor the run's locustfile) knows."""


def locust_parser() -> Any:
    """Locust's own parser, as its main builds it (without any plugin's options)."""
    from locust.argument_parser import get_parser

    return get_parser()


def option_strings(parser: Any) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def locust_help_options() -> list[tuple[list[str], str, str | None]]:
    """[(flags, help, metavar)] of LOCUST_SHOWN from Locust's parser, defaults written as ours are
    ("[default: X]"); an option this Locust does not have is left out."""
    out = []
    by_flag = {s: a for a in locust_parser()._actions for s in a.option_strings}
    for flag in LOCUST_SHOWN:
        action = by_flag.get(flag)
        if action is None:
            continue
        text = _DEFAULT_SENTENCE.sub("", action.help or "").strip()
        default = OUR_DEFAULTS.get(flag) or (action.default if action.default not in (None, False, "", 0) else "")
        if default:
            text += f" [default: {default}]"
        metavar = None if action.nargs == 0 else (action.metavar or action.dest.upper())
        short = [s for s in action.option_strings if not s.startswith("--")]
        long = [s for s in action.option_strings if s.startswith("--")]
        out.append((short + long, text, metavar))
    return out


def locustfile_options(locustfile: str) -> set[str]:
    """The options a locustfile adds with `parser.add_argument("--x", ...)` (its source read, not
    imported; a folder: its .py files; several files: comma-separated, as Locust takes them)."""
    found: set[str] = set()
    for part in filter(None, (p.strip() for p in locustfile.split(","))):
        path = Path(part)
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            try:
                tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
            except (OSError, SyntaxError, ValueError):
                continue  # Locust says what is wrong with it
            found |= _added_options(tree)
    return found


def _added_options(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return {s for s in out if s.startswith("-")}


def check_passthrough(passthrough: list[str], ours: set[str], locustfile: str = "") -> None:
    """UnknownOption for the first option in `passthrough` (what our parser left for Locust) that
    neither parser knows, naming the closest known one."""
    flags = [_flag(t) for t in _option_tokens(passthrough)]
    flags = [f for f in flags if f not in ours]
    if not flags:
        return
    theirs = option_strings(locust_parser()) | (locustfile_options(locustfile) if locustfile else set())
    known = ours | theirs
    for flag in flags:
        if flag in known or (len(flag) > 2 and not flag.startswith("--") and flag[:2] in known):
            continue  # -LDEBUG: a short option with its value attached
        raise UnknownOption(f"unknown option {flag}{_did_you_mean(flag, ours, theirs)}; {_HINT}")


# Locust's options whose value is a TCP port: checked here, since Locust binds without checking
# (`--web --web-port 99999`: an OverflowError traceback from bind(), and exit 0)
LOCUST_PORTS = ("--web-port", "-P", "--master-port", "--master-bind-port")


def check_ports(passthrough: list[str]) -> None:
    """ValueError for a Locust port option whose value is not a port number (1 to 65535)."""
    for i, token in enumerate(passthrough):
        flag, _, attached = token.partition("=") if token.startswith("--") else (token, "", "")
        if flag not in LOCUST_PORTS:
            continue
        value = attached or (passthrough[i + 1] if i + 1 < len(passthrough) else "")
        if not (value.isdigit() and 1 <= int(value) <= 65535):
            raise ValueError(f"{flag}: {value!r} is not a port: a port is a number from 1 to 65535")


_HINT = "`llm-locust run --help` lists ours and the Locust options most runs use; `locust --help` all of Locust's"


def _option_tokens(argv: list[str]) -> list[str]:
    out = []
    for token in argv:
        if token == "--":
            break
        if token.startswith("-") and len(token) > 1 and not _NUMBER.match(token):
            out.append(token)
    return out


def _flag(token: str) -> str:
    return token.split("=", 1)[0] if token.startswith("--") else token


def _did_you_mean(flag: str, ours: set[str], theirs: set[str]) -> str:
    """The closest known option: one it abbreviates (`--sl`: --slo), else by spelling; ours first."""
    for known in (ours, ours | theirs):
        longs = sorted(k for k in known if k.startswith("--"))
        close = [k for k in longs if k.startswith(flag)] if flag.startswith("--") and len(flag) > 3 else []
        close = close or difflib.get_close_matches(flag, longs, n=1, cutoff=0.75 if known is ours else 0.6)
        if close:
            return f" (did you mean {close[0]}?)"
    return ""

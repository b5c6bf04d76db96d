"""Everything derived from the one declaration of the settings (settings.model):

    add_locust_arguments(parser)            # Locust's parser: locust -f, locust.conf, LOCUST_* variables
    run_parser() -> argparse.ArgumentParser # `llm-locust run` and its grouped --help
    from_options(namespace) -> Settings     # what Locust parsed (master, workers, plain locust -f)
    load_plan(path) -> Given                # a YAML plan, every problem with file:line
    plan_values(data, ...) -> Given         # a plan as plain data (a results file's effective plan)
    resolve(plan, cli) -> Settings          # the command line wins over the plan; one validation
    to_plan(settings) -> dict               # the effective plan, every value explicit
    to_locust_argv(settings) -> list[str]   # the options that give Locust's run these settings

Errors are SettingsError (a PlanError, a ValueError): one line per problem, naming the flag the
user typed or the plan's file:line and key, with did-you-mean for unknown keys.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from llm_locust.safe.masking import protect_url
from llm_locust.settings import limits as sizes
from llm_locust.settings.ladder_spec import parse_ladder
from llm_locust.settings.model import BARE_SLO_LIMIT, GROUPS, Opt, Settings, options
from llm_locust.settings.units import PlanError, _typename, is_bare, read_yaml
from llm_locust.workload.synth import parse_spec_text
from llm_locust.workload.values import suggest

SettingsError = PlanError


@dataclass
class Given:
    """Values for some fields and where each came from ("--flag" or "FILE:LINE: plan.path")."""

    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    source: str = ""
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, message): keys that are not settings


# ---- where a value came from, for messages ----


def flag_names(name: str, opt: Opt) -> str:
    return f"{opt.short}/{opt.flag_for(name)}" if opt.short else opt.flag_for(name)


def _validate(given: Given, *, defaults_where: str = "") -> Settings:
    """One validation of every given value; SettingsError lists each problem where it was given."""
    opts = options()
    problems = list(given.problems)
    try:
        s = Settings.model_validate(given.values)
    except ValidationError as e:
        for err in e.errors():
            name = str(err["loc"][0]) if err["loc"] else ""
            msg = err["msg"]
            got = err.get("input")
            if err["type"] == "literal_error" and name in Settings.model_fields:
                msg = _unknown_choice(name, got)
            elif msg.startswith("Value error, "):
                msg = msg.removeprefix("Value error, ")
            elif not isinstance(got, (dict, list)):
                msg += f", got {got!r}"
            problems.append((_line(given.where.get(name, "")), f"{_where(name, given, opts, defaults_where)}: {msg}"))
    else:
        problems += [
            (_line(given.where.get(n, "")), f"{_where(n, given, opts, defaults_where)}: {m}")
            for n, m in s.cross_problems()
        ]
    if problems:
        raise SettingsError([p for _, p in sorted(problems, key=lambda t: t[0])], given.source)
    for url in (s.mlflow, s.server_metrics, s.gpu_metrics):  # masked in every output from now on
        protect_url(url)
    return s


def _choices(annotation: Any) -> list[str]:
    """The values of the Literal in a field's type (Route, Arrivals, image formats ...)."""
    if get_origin(annotation) is Literal:
        return [str(a) for a in get_args(annotation)]
    return [c for a in get_args(annotation) for c in _choices(a)]


def _unknown_choice(name: str, got: Any) -> str:
    """Every enum's error: the value, a did-you-mean, the choices (`--route afinity`)."""
    known = _choices(Settings.model_fields[name].annotation)
    return f"unknown value {got!r}{suggest(str(got), known)}; one of {', '.join(known)}"


def _line(where: str) -> int:
    """The line number in "FILE:LINE: key" (0 without one): problems are listed in file order."""
    head = where.split(": ", 1)[0]
    tail = head.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def _where(name: str, given: Given, opts, defaults_where: str) -> str:
    if name in given.where:
        return given.where[name]
    if name in opts:
        _, opt = opts[name]
        return flag_names(name, opt) if not defaults_where else f"{defaults_where}: {opt.plan or name}"
    return defaults_where or "settings"


# ---- argparse: Locust's parser and `llm-locust run` ----


def _help(name: str, default: Any, opt: Opt) -> str:
    """An option's help: what it does, the duration rule, then [default: ...] and [plan: KEY], the
    same way for every option (a flag shows no default: it is off unless given)."""
    text = opt.help
    if opt.unit == "s":
        below = f", below {opt.bare_below:.0f}" if opt.bare_below else ""
        text += f" (a duration: 500ms, 30s, 2m; a bare number is seconds{below})"
    shown = opt.default_text or _default_text(default, opt)
    if shown:
        text += f" [default: {shown}]"
    if opt.plan:
        text += f" [plan: {opt.plan}]"
    return text


def _default_text(default: Any, opt: Opt) -> str:
    if default in ("", None, {}) or isinstance(default, bool):
        return ""
    if isinstance(default, float):
        return f"{default:g}{opt.unit}"
    return str(default)


def _add(group, name: str, default: Any, opt: Opt, *, locust: bool) -> None:
    flags = ([opt.short] if opt.short else []) + [opt.flag_for(name)]
    kw: dict[str, Any] = {"dest": name, "help": _help(name, default, opt).replace("%", "%%")}
    if isinstance(default, bool):
        kw["action"] = "store_const"
        kw["const"] = not opt.negate
    else:
        kw["metavar"] = "DURATION" if opt.unit == "s" else opt.flag_for(name).lstrip("-").replace("-", "_").upper()
    if locust:
        # Locust's parser: defaults as values (its web UI shows them), its config file and env vars
        kw["default"] = default if not isinstance(default, dict) else ""
        kw["env_var"] = "LOCUST_" + name.upper()
    else:
        kw["default"] = argparse.SUPPRESS  # only what the user typed: it overrides the plan
        if name == "host":
            kw["action"] = _RepeatedHost
    action = group.add_argument(*flags, **kw)
    if locust:  # what Locust's own add_argument sets: its web UI's form shows load figures only
        action.include_in_web_ui = opt.web
        action.is_secret = action.is_required = action.is_multiple = False


class _RepeatedHost(argparse.Action):
    """`llm-locust run --host A --host B`: A is the host, B and the rest are --endpoints."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "host", None) in (None, argparse.SUPPRESS):
            namespace.host = values
            return
        more = getattr(namespace, "endpoints", "")
        namespace.endpoints = f"{more},{values}" if more else values


def add_locust_arguments(parser) -> None:
    """Our options on Locust's parser, grouped as in `llm-locust run --help`."""
    groups: dict[str, Any] = {}
    for name, (default, opt) in options().items():
        if opt.locust or opt.run_only:
            continue  # Locust's own option, or one `llm-locust run` uses itself
        if opt.group not in groups:
            groups[opt.group] = parser.add_argument_group("llm-locust " + GROUPS[opt.group])
        _add(groups[opt.group], name, default, opt, locust=True)


LOCUST_GROUP = "Locust's own options most runs use (passed to Locust as they are)"


def run_parser(locust_options: list[tuple[list[str], str, str | None]] | None = None) -> argparse.ArgumentParser:
    """`llm-locust run`'s parser: the common options first, then a group for each part of a run, in
    GROUPS' order; `locust_options` ([(flags, help, metavar)], read from Locust's own parser by the
    caller, for --help) is listed last. No abbreviations: `--sl` is not taken as `--slo`."""
    p = argparse.ArgumentParser(
        prog="llm-locust run",
        usage="llm-locust run [PLAN.yaml | RESULTS.json] [options] [Locust options]",
        description="Load-test an LLM inference server (default: the built-in simulator). A plan file "
        "(YAML) or an earlier run's results file gives the settings; options typed here win over it. "
        "A file is data: it never picks the target, the key's variable, a command or code to run, who may "
        "reach the run (web UI origins, exporter address), where records go, nor replaces a file, unless "
        "--trust-plan says so.",
        epilog="Every other option goes to Locust as it is (`locust --help` lists them); an option "
        "that neither llm-locust nor Locust knows is refused before anything starts. Plan keys are "
        "named [plan: KEY] above. Durations take a unit (500ms, 30s, 2m, 1h); a bare number is seconds, "
        "and one past the option's own bound is refused. Sizes have bounds past which a run only "
        f"overloads the machine: {sizes.MAX_USERS} users, {sizes.MAX_STREAMS_PER_PROCESS} users a local "
        f"process, {sizes.max_local_workers()} local workers here (twice the cores), "
        f"{sizes.MAX_SYNTH_REQUESTS} synthetic requests, {sizes.MAX_TOKENS} tokens a request.",
        allow_abbrev=False,
    )
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    for name, (default, opt) in options().items():
        _add(groups[opt.group], name, default, opt, locust=False)
    if locust_options:
        theirs = p.add_argument_group(LOCUST_GROUP)
        for flags, text, metavar in locust_options:
            kw: dict[str, Any] = {"help": text.replace("%", "%%"), "default": argparse.SUPPRESS}
            if metavar is None:
                kw["action"] = "store_true"
            else:
                kw["metavar"] = metavar
            theirs.add_argument(*flags, **kw)
    return p


def cli_values(namespace: argparse.Namespace) -> Given:
    """What `run_parser` read: only the options the user typed. Input paths are made absolute,
    so the effective plan finds them from anywhere."""
    opts = options()
    g = Given(source="command line")
    for name, v in vars(namespace).items():
        if name in opts:
            if opts[name][1].path == "in" and isinstance(v, str) and v:
                v = os.path.abspath(os.path.expanduser(v))
            g.values[name] = v
            g.where[name] = flag_names(name, opts[name][1])
    return g


def from_options(namespace: Any) -> Settings:
    """The settings of a running Locust: our options from its parsed namespace, and the Locust
    options that are ours too (host, users, spawn rate, run time) under their Locust names."""
    given = Given(source="options")
    opts = options()
    for name, (_default, opt) in opts.items():
        if opt.run_only:
            continue
        dest = opt.locust or name
        if namespace is None or not hasattr(namespace, dest):
            continue
        v = getattr(namespace, dest)
        if v is None or (opt.locust and name == "host" and not v):
            continue
        if isinstance(v, list):
            v = v[0] if v else None  # Locust's -f may be a list
            if v is None:
                continue
        if name == "run_time" and isinstance(v, int) and not isinstance(v, bool):
            v = f"{v}s"  # Locust parsed -t into whole seconds
        given.values[name] = v
        given.where[name] = flag_names(name, opt)
    if given.values.get("ladder"):  # the ladder's shape sets Locust's users and spawn rate itself
        for name in ("users", "spawn_rate"):
            given.values.pop(name, None)
    return _validate(given)


# ---- plans ----


def _plan_paths() -> dict[str, str]:
    return {opt.plan: name for name, (_, opt) in options().items() if opt.plan}


def plan_keys() -> dict[str, list[str]]:
    """For each mapping in a plan (by dotted path, "" the top), the keys it may hold."""
    out: dict[str, list[str]] = {}
    for path in _plan_paths():
        parts = path.split(".")
        for i in range(len(parts)):
            parent = ".".join(parts[:i])
            out.setdefault(parent, [])
            if parts[i] not in out[parent]:
                out[parent].append(parts[i])
    out.setdefault("ladder", []).extend(k for k in LADDER_LEVEL_KEYS if k not in out["ladder"])
    return out


LADDER_LEVEL_KEYS = ("kind", "steps", "start", "stop", "factor", "step", "search", "burst")


def plan_values(
    data: Any,
    *,
    source: str = "",
    base_dir: str | Path | None = None,
    lines: dict[tuple, int] | None = None,
    written: bool = False,
) -> Given:
    """The fields a plan sets (a parsed YAML document, or an effective plan from a results file).

    Unknown keys, mappings where values belong and keys given twice are reported with their line;
    relative input paths are read from base_dir (the plan's folder). `written`: a plan llm-locust
    wrote (a results file's effective plan), whose bare durations are seconds whatever their size
    (results of earlier versions wrote them bare)."""
    lines = lines or {}
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    given = Given(source=source)
    w = _PlanWalk(given, lines, base, _plan_paths(), plan_keys(), options(), written=written)
    if data is None:
        data = {}
    _walk_plan(w, data, ())
    given.problems = w.problems
    return given


@dataclass
class _PlanWalk:
    """What walking one plan needs (its lines, the keys it may hold) and what the walk found."""

    given: Given
    lines: dict[tuple, int]
    base: Path
    by_path: dict[str, str]
    keys: dict[str, list[str]]
    opts: dict[str, tuple[Any, Opt]]
    written: bool = False  # by llm-locust (plan_values)
    problems: list[tuple[int, str]] = field(default_factory=list)


def _plan_line(w: _PlanWalk, path: tuple) -> int | None:
    """The line of path in the plan, else of its nearest ancestor that has one (messages point there)."""
    line, p = None, path
    while p and line is None:
        line = w.lines.get(p)
        p = p[:-1]
    return line


def _plan_where(w: _PlanWalk, path: tuple) -> str:
    """`FILE:LINE: dotted.path`, as messages and Given.where name a plan value."""
    line = _plan_line(w, path)
    dotted = ".".join(str(x) for x in path) or "plan"
    loc = f"{w.given.source}:{line}" if line is not None else w.given.source
    return f"{loc}: {dotted}" if loc else dotted


def _plan_err(w: _PlanWalk, path: tuple, msg: str) -> None:
    """Record a problem with its line, so that problems can be reported in file order."""
    w.problems.append((_plan_line(w, path) or 0, f"{_plan_where(w, path)}: {msg}"))


def _plan_put(w: _PlanWalk, name: str, path: tuple, value: Any) -> None:
    """Set a field from the plan; relative input paths are resolved against the plan's folder."""
    _, opt = w.opts[name]
    if opt.path == "in" and isinstance(value, str) and value:
        p = Path(os.path.expanduser(value))
        value = os.path.abspath(p if p.is_absolute() else w.base / p)
    if name == "synthetic" and isinstance(value, dict):
        value = _resolve_empirical(value, w.base)
    if w.written and opt.unit == "s" and is_bare(value):
        value = f"{float(value)!r}s"
    w.given.values[name] = value
    w.given.where[name] = _plan_where(w, path)


def _walk_plan(w: _PlanWalk, d: Any, path: tuple) -> None:
    """Read one mapping of the plan (the top one when path is ())."""
    dotted = ".".join(path)
    if not isinstance(d, dict):
        _plan_err(w, path, f"expected a mapping of {', '.join(w.keys.get(dotted, []))}, got {_typename(d)}")
        return
    if dotted == "ladder":
        levels = {k: d[k] for k in LADDER_LEVEL_KEYS if k in d}
        if levels:
            _plan_put(w, "ladder", path, levels)
    for k, v in d.items():
        if dotted == "ladder" and k in LADDER_LEVEL_KEYS:
            continue
        _walk_plan_key(w, k, v, path, dotted)


def _walk_plan_key(w: _PlanWalk, k: Any, v: Any, path: tuple, dotted: str) -> None:
    """Read one key of a plan mapping: a setting, a nested mapping, or a problem."""
    sub = path + (k,)
    full = ".".join(sub)
    if k == "api_key" and not path:
        _plan_err(w, sub, "never put the key in a plan: set an environment variable and name it with api_key_env")
        return
    if full in w.by_path:
        name = w.by_path[full]
        if isinstance(v, dict) and full in w.keys and name != "slo":
            _walk_plan(w, v, sub)  # e.g. ladder: {...}, workload.synthetic is a value
        elif v is not None:
            _plan_put(w, name, sub, v)
    elif full in w.keys:
        if v is not None:
            if full == "early_stop" and isinstance(v, bool):
                _plan_put(w, "early_stop", sub, v)
            else:
                _walk_plan(w, v, sub)
    else:
        known = w.keys.get(dotted, [])
        place = _belongs(w, str(k), dotted)
        hint = f" here: it belongs {place}" if place else suggest(str(k), known)
        _plan_err(w, sub, f"unknown key {k!r}{hint}; known: {', '.join(known)}")


def _belongs(w: _PlanWalk, key: str, dotted: str) -> str:
    """Where a key given in the wrong mapping belongs (`warmup:` at the top: "under ladder:
    (ladder.warmup)"), by the last part of a plan key or by a setting's name (`request_timeout:` is
    timeouts.request); "" when it is nowhere."""
    key = key.replace("-", "_")
    places = [f"{parent}.{key}".lstrip(".") for parent, keys in w.keys.items() if parent != dotted and key in keys]
    if not places and key in w.opts and w.opts[key][1].plan:
        places = [str(w.opts[key][1].plan)]
    if not places:
        return ""
    parent = places[0].rpartition(".")[0]
    return f"under {parent}: ({places[0]})" if parent else f"at the top of the plan ({places[0]})"


def _resolve_empirical(spec: dict, base: Path) -> dict:
    out = dict(spec)
    for key in ("input", "output"):
        v = out.get(key)
        if isinstance(v, str) and v.startswith("empirical:"):
            p = Path(os.path.expanduser(v.partition(":")[2]))
            out[key] = "empirical:" + os.path.abspath(p if p.is_absolute() else base / p)
    return out


def load_plan(path: str | Path) -> Given:
    """A YAML plan's values (not yet validated: `resolve` does that with the command line)."""
    data, lines = read_yaml(path, "plan")
    return plan_values(data, source=str(path), base_dir=Path(path).resolve().parent, lines=lines)


def resolve(plan: Given | None = None, cli: Given | None = None) -> Settings:
    """The command line over the plan, validated once; each problem where its value was given."""
    merged = Given(source=(plan.source if plan else "") or "command line")
    if plan is not None and cli is not None:
        # one workload: a trace typed on the command line replaces the plan's synthetic one, and back
        for given, other in (("trace", ("synthetic",)), ("synthetic", ("trace", "trace_format"))):
            if given in cli.values and given not in plan.values:
                plan = Given(
                    {k: v for k, v in plan.values.items() if k not in other},
                    {k: v for k, v in plan.where.items() if k not in other},
                    plan.source,
                    plan.problems,
                )
    for g in (plan, cli):
        if g is not None:
            merged.values.update(g.values)
            merged.where.update(g.where)
            merged.problems += g.problems
    return _validate(merged)


# ---- the effective plan, and back to Locust's command line ----


def _plain(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def to_plan(s: Settings) -> dict[str, Any]:
    """The effective plan: every plan key with its value; `plan_values` of it gives `s` back."""
    out: dict[str, Any] = {}
    for name, (_, opt) in options().items():
        if not opt.plan:
            continue
        if name == "ladder":
            if s.ladder:
                out.setdefault("ladder", {}).update(_ladder_plan(s.ladder))
            continue
        v = _plan_value(s, name, opt)
        if v is _LEFT_OUT:
            continue
        parts = opt.plan.split(".")
        target = out
        for p in parts[:-1]:
            target = target.setdefault(p, {})
        target[parts[-1]] = dict(v) if isinstance(v, dict) else _plain(v)
    return out


_LEFT_OUT = object()  # a setting the effective plan does not hold (it follows from others)


def _ladder_plan(spec: str) -> dict[str, Any]:
    """The ladder's kind and levels as the plan writes them."""
    ld = parse_ladder(spec)
    if ld.search is not None:  # an SLA search stays a search: its levels are chosen as it runs
        return {"kind": ld.kind, "search": spec.split(":sla:", 1)[1]}
    if ld.burst is not None:  # a burst keeps its spec: base rate, factor, lengths
        return {"kind": ld.kind, "burst": ld.burst.spec()}
    if ld.durations:  # a rate series keeps each step's length: R@T
        return {"kind": ld.kind, "steps": spec.split(":", 1)[1].split(",")}
    return {"kind": ld.kind, "steps": [_plain(x) for x in ld.levels]}


def _plan_value(s: Settings, name: str, opt: Opt) -> Any:
    """One setting's value as the effective plan holds it, or _LEFT_OUT."""
    v = getattr(s, name)
    if (name == "warmup" or name.startswith(("step_", "stable_", "arrivals"))) and not s.ladder:  # a ladder's
        return _LEFT_OUT
    if name.startswith("stable_") and not s.stable_window:
        return _LEFT_OUT
    if name in ("trace", "trace_format") and s.synthetic:
        return _LEFT_OUT
    if name in ("users", "spawn_rate") and s.mode != "closed" or v is None:
        return _LEFT_OUT  # ladders and replays set their own users
    if name == "synthetic":
        if not v:
            return _LEFT_OUT
        return asdict(parse_spec_text(v))
    if name == "slo":
        return _slo_plan(v)
    if opt.unit == "s" and opt.bare_below and v >= opt.bare_below:
        return f"{_text(v)}s"  # read back as written: a bare number this large is refused
    return v


def _text(v: Any, name: str = "") -> str:
    if isinstance(v, float):
        return repr(v) if not 1e-4 <= abs(v) < 1e15 and v else f"{v:.12g}"
    if isinstance(v, dict) and name == "slo":  # latency limits with their unit, so any value reads back the same
        return ",".join(f"{k}={_text(x)}" if k == "error_rate" else f"{k}={_text(x)}s" for k, x in v.items())
    if isinstance(v, dict) and name == "mix":
        return ",".join(f"{k}:{_text(x)}" for k, x in v.items())
    if isinstance(v, dict):
        return ",".join(f"{k}={_text(x)}" for k, x in v.items())
    return str(v)


def _slo_plan(slos: dict[str, float]) -> dict[str, Any]:
    return {k: (_plain(x) if k == "error_rate" or x < BARE_SLO_LIMIT else f"{_text(x)}s") for k, x in slos.items()}


def to_locust_argv(s: Settings) -> list[str]:
    """Our options that differ from their defaults, as Locust's command line takes them (Locust's
    own options, such as host and users, are the caller's: their defaults depend on the mode)."""
    argv: list[str] = []
    for name, (default, opt) in options().items():
        if opt.locust or opt.run_only:
            continue
        v = getattr(s, name)
        if v == default:
            continue
        flag = opt.flag_for(name)
        if isinstance(default, bool):
            argv.append(flag)
        else:
            argv += [flag, _text(v, name) + ("s" if opt.unit == "s" else "")]  # a duration: with its unit
    return argv

"""Every setting of a run, declared once.

Each field of `Settings` carries its type, default and constraints (pydantic) and an `Opt`: its
group, help text, command-line flag, path in a YAML plan, and whether the web UI's start form may
set it. Everything else is derived from that one declaration (settings.derive):

- the options Locust's parser gets (so `locust -f`, `locust.conf` and `LOCUST_*` variables take
  them) and `llm-locust run`'s own parser and `--help`;
- the YAML plan schema: which keys exist, their validation, file:line in every message;
- the effective plan kept in the results, which `llm-locust run RESULTS.json` runs again.

A new option is one field here. Values may be given as text (command line, environment) or as
YAML values; durations take units everywhere (`500ms`, `1.5s`, `2m`; a bare number is seconds).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from llm_locust.analysis.agents import parse_tier
from llm_locust.analysis.precision_targets import parse_targets
from llm_locust.analysis.steps import SLO_STATS, STEP_LATENCIES, check_slo_names, request_slos, slo_vocabulary
from llm_locust.metrics.aggregate import SLO_METRICS
from llm_locust.metrics.recordlog import name_problem
from llm_locust.protocols import API_NAMES as _STREAM_APIS
from llm_locust.protocols import GRPC_APIS
from llm_locust.protocols.base import MAX_BODY_BYTES, MAX_EVENT_BYTES, MAX_HEAD_BYTES, Limits, Timeouts
from llm_locust.settings import limits as sizes
from llm_locust.settings.grid_spec import grid_text
from llm_locust.settings.ladder_spec import DEFAULT_DURATION, DEFAULT_WARMUP, EarlyStop, PlanError, parse_ladder
from llm_locust.settings.units import bare_seconds, check_bound, run_time_seconds
from llm_locust.workload.agentic import ALIASES, SESSION_FORMATS, is_session_format
from llm_locust.workload.arrivals import ARRIVAL_KINDS, MAX_BURSTINESS, MIN_BURSTINESS, Arrivals
from llm_locust.workload.cancel import parse_cancel
from llm_locust.workload.formats import FORMATS
from llm_locust.workload.graded import load_graded
from llm_locust.workload.images import parse_size
from llm_locust.workload.prefix_dist import parse_prefix_dist
from llm_locust.workload.rate_curve import parse_rate_curve
from llm_locust.workload.specs import load_schema
from llm_locust.workload.synth import SynthSpec, parse_spec_text
from llm_locust.workload.tokenizer import load_tokenizer
from llm_locust.workload.values import suggest

API_NAMES = _STREAM_APIS + GRPC_APIS  # what --api takes

GROUPS = {  # `llm-locust run --help` shows the groups in this order
    "common": "common options (most runs need only these)",
    "target": "target: the server and how to talk to it",
    "requests": "requests: timeouts, size limits and the checks before and during a run",
    "workload": "workload: what is sent",
    "load": "load shape: closed loop and replay",
    "ladder": "ladder: stepped load, each step's timing and the early stop",
    "verdicts": "SLOs and stability verdicts: what a run is judged by",
    "repeat": "repeats and the regression gate",
    "run": "how it runs: worker processes, the web UI, the locustfile, plans",
    "outputs": "outputs",
    "observe": "observability: the server's and the GPU's own figures",
    "cost": "efficiency and cost",
    "sim": "simulator (used when no --host is given)",
}


@dataclass(frozen=True)
class Opt:
    """How one setting is given and shown (the type, default and limits are the field's own)."""

    group: str
    help: str
    plan: str | None = None  # dotted path in a YAML plan; None: command line only
    flag: str | None = None  # default: --NAME with dashes
    short: str | None = None
    locust: str | None = None  # a Locust option of its own (--host, -u ...): its parsed dest
    web: bool = False  # the web UI's start form may set it (load figures only, never paths or names)
    negate: bool = False  # a boolean whose flag turns it off (--no-force-length)
    path: str = ""  # "in": an input path, relative to the plan's folder; "out": relative to cwd
    unit: str = ""  # shown in --help: "s" for durations
    run_only: bool = False  # an option of `llm-locust run` itself, not given to Locust
    bare_below: float | None = None  # durations: a bare number (seconds) from this up is refused: write the unit
    default_text: str = ""  # --help's [default: ...] where the default value alone says nothing
    trust: str = ""  # what a plan's or results file's value would do that needs --trust-plan (settings.sources)

    def flag_for(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")


# ---- value types: each reads text (command line) and YAML values alike ----


def _seconds(v: Any, info: ValidationInfo) -> Any:
    """A duration: a number of seconds or text with a unit, by the one rule for bare numbers
    (units.bare_seconds: refused from the option's Opt.bare_below up, "write the unit")."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return v
    field = Settings.model_fields.get(info.field_name or "")
    opt = next((m for m in field.metadata if isinstance(m, Opt)), None) if field is not None else None
    return bare_seconds(v, opt.bare_below if opt is not None else None)


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number, got {v!r}")
    return v


def _text(v: Any) -> Any:
    return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _whole(v: float) -> str:
    """1000000, not 1e+06."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e18 else f"{v:g}"


def _at_most(limit: float, why: str) -> Any:
    """A sensible limit (settings.limits): past it the run ends in MemoryError or an overloaded
    machine, so the value is refused saying why."""

    def check(v: Any) -> Any:
        if v is not None and v > limit:
            raise ValueError(f"{_whole(v)} is more than {_whole(limit)}, the most {why}")
        return v

    return check


def _record_log_name(v: str) -> str:
    """A record log is JSON lines: a name that says another format (LOG.parquet) is refused."""
    why = name_problem(v) if v else None
    if why is not None:
        raise ValueError(why)
    return v


Seconds = Annotated[float, BeforeValidator(_seconds), AfterValidator(_finite)]
Number = Annotated[float, AfterValidator(_finite)]
Text = Annotated[str, BeforeValidator(_text)]


# SLOs: latency limits in seconds (a unit may be written: 500ms); error_rate a fraction or "1%".
# A bare latency number of 10 or more is refused: it is almost surely milliseconds meant.
BARE_SLO_LIMIT = 10.0


def parse_slos(value: Any) -> dict[str, float]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        items: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, v = part.partition("=")
            if not sep:
                raise ValueError(f"bad SLO {part!r}: expected METRIC=LIMIT, e.g. ttft=500ms")
            items[name.strip()] = v.strip()
        value = items
    if not isinstance(value, dict):
        raise ValueError("expected METRIC=LIMIT,... or a mapping of METRIC: LIMIT")
    out: dict[str, float] = {}
    for name, limit in value.items():
        name = str(name)
        try:
            check_slo_names({name: 0.0})
        except ValueError:
            raise ValueError(
                f"unknown SLO metric {name!r}{suggest(name, _slo_examples())}; known: {slo_vocabulary()}"
            ) from None
        if name == "error_rate":
            if isinstance(limit, str) and limit.strip().endswith("%"):
                limit = float(limit.strip()[:-1]) / 100
            elif isinstance(limit, str):
                limit = float(limit)
            if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                raise ValueError(f"{name}: expected a fraction (0.01) or a percentage ('1%'), got {limit!r}")
            limit = float(limit)
        else:
            limit = bare_seconds(limit, BARE_SLO_LIMIT, label=f"{name}={str(limit).strip()}")
        if not limit >= 0 or not math.isfinite(limit):
            raise ValueError(f"{name}: a limit must be a finite number >= 0, got {limit!r}")
        out[name] = limit
    return out


def _precision(value: Any) -> dict[str, float]:
    """--precision's targets (analysis.precision_targets.parse_targets)."""
    return parse_targets(value)


def _slo_examples() -> list[str]:
    return list(SLO_METRICS) + ["error_rate"] + [f"{m}_{s}" for m in STEP_LATENCIES for s in SLO_STATS]


def parse_share(text: Any) -> float:
    """A share as a fraction (0.05) or a percentage ("5%", as the summary prints it)."""
    t = str(text).strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"expected a fraction or a percentage (5%), got {t!r}") from None


def parse_tolerance(text: Any) -> float:
    """A tolerance as a fraction (0.05) or a percentage ("5%"), between 0 and 1."""
    t = str(text).strip()
    tol = parse_share(t)
    if not 0 <= tol < 1:
        raise ValueError(f"must be between 0 and 100%, got {t!r}")
    return tol


def _synthetic(v: Any) -> Any:
    """A synthetic workload as `key=value,...` text, every key written (a YAML mapping too), so the
    same workload always reads the same."""
    if isinstance(v, dict):
        v = ",".join(f"{k}={x:g}" if isinstance(x, float) else f"{k}={x}" for k, x in v.items() if x is not None)
    if isinstance(v, str) and v:
        _check_synthetic_items(v)
        spec = parse_spec_text(v)  # ValueError says what is wrong
        if spec.requests > sizes.MAX_SYNTH_REQUESTS:
            raise ValueError(
                f"requests={spec.requests} is more than {sizes.MAX_SYNTH_REQUESTS}, the most a synthetic workload "
                "generates (it is built in memory before the run): fewer requests, or --replay --loops N"
            )
        items = {k: x for k, x in asdict(spec).items() if k != "burstiness" or x != 1.0}  # 1: Poisson, as before
        v = ",".join(f"{k}={x:g}" if isinstance(x, float) else f"{k}={x}" for k, x in items.items())
    return v


def _rate_curve(v: Any) -> Any:
    """--rate as its one written form (workload.rate_curve), or "" for none; bad text is refused."""
    if v is None or v == "":
        return ""
    return parse_rate_curve(_text(v)).text


def _prefix_dist(v: Any) -> Any:
    """--prefix-dist as its one written form (workload.prefix_dist), or "" for none."""
    if v is None or v == "":
        return ""
    return parse_prefix_dist(_text(v)).text


def _cancel(v: Any) -> Any:
    """--cancel as its one written form (workload.cancel), or "" for none; bad text is refused."""
    if v is None or v == "":
        return ""
    spec = parse_cancel(_text(v))
    return spec.text if spec is not None else ""


def _check_synthetic_items(text: str) -> None:
    """Each `key=value` of a synthetic workload: a known key (did-you-mean), whole numbers said so
    (int() would say "invalid literal ... base 10"), arrivals one of its choices."""
    keys = list(SynthSpec.__dataclass_fields__)
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, x = (s.strip() for s in part.partition("="))
        key = key.replace("-", "_")
        if not sep or key not in keys:
            raise ValueError(f"bad synthetic workload item {part!r}{suggest(key, keys)}; keys: {', '.join(keys)}")
        if key in ("requests", "prefix_tokens", "seed") and not x.lstrip("-").isdigit():
            raise ValueError(f"{key}: expected a whole number, got {x!r}")
        if key == "arrivals" and x not in ARRIVAL_KINDS:
            raise ValueError(
                f"arrivals: unknown value {x!r}{suggest(x, ARRIVAL_KINDS)}; one of {', '.join(ARRIVAL_KINDS)}"
            )
        if key == "burstiness":
            _check_synthetic_burstiness(x)


def _check_synthetic_burstiness(x: str) -> None:
    """A synthetic workload's burstiness= (gamma arrivals, workload.arrivals): a number in range."""
    try:
        b = float(x)
    except ValueError:
        raise ValueError(f"burstiness: expected a number (1 = Poisson, below 1 burstier), got {x!r}") from None
    if not MIN_BURSTINESS <= b <= MAX_BURSTINESS:
        raise ValueError(f"burstiness: {x} is outside {MIN_BURSTINESS:g}..{MAX_BURSTINESS:g} (1 = Poisson)")


def _ladder_spec(v: Any) -> Any:
    """The ladder's levels as the short syntax; a YAML mapping's kind and levels are folded into it."""
    if isinstance(v, dict):
        kind = v.get("kind")
        if not kind:
            raise ValueError("missing kind: one of concurrency, rate, speed")
        if "search" in v:  # an SLA search: sla:KIND:LO..HI:P% (docs/load-shapes.md)
            if any(k in v for k in ("steps", "start", "stop", "factor", "step")):
                raise ValueError("a search chooses its own levels: give search: LO..HI:P% without steps or start/stop")
            return f"sla:{kind}:{v['search']}"
        if "burst" in v:  # a burst: rate:burst:rate=R,x=N,for=T,... (docs/load-shapes.md)
            if any(k in v for k in ("steps", "start", "stop", "factor", "step", "search")):
                raise ValueError(
                    "a burst sets its own levels: give burst: rate=R,x=N,for=T without steps or start/stop"
                )
            if kind != "rate":
                raise ValueError(f"a burst is a rate ladder: kind: rate, got {kind!r}")
            return f"rate:burst:{v['burst']}"
        return _ladder_levels_spec(kind, v)
    return v


def _ladder_levels_spec(kind: Any, v: dict) -> str:
    """`KIND:LEVELS` from a YAML mapping's steps list or start/stop range (with factor or step)."""
    if "steps" in v and any(k in v for k in ("start", "stop", "factor", "step")):
        raise ValueError("give either steps: [..] or start/stop (with factor or step), not both")
    if "steps" in v:
        steps = v["steps"]
        if not isinstance(steps, list) or not steps:
            raise ValueError("steps: expected a non-empty list of levels")
        for x in steps:
            if isinstance(x, str) and "@" in x:
                continue  # a rate series' step, R@T (settings.ladder parses it)
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ValueError(f"steps: expected numbers (or R@T, a rate series' steps), got {x!r}")
        return f"{kind}:{','.join(x.strip() if isinstance(x, str) else f'{float(x):g}' for x in steps)}"
    if "start" in v or "stop" in v:
        if "start" not in v or "stop" not in v:
            raise ValueError("a range needs both start and stop")
        if "factor" in v and "step" in v:
            raise ValueError("give factor (geometric) or step (linear), not both")
        mod = f":+{v['step']}" if "step" in v else f":x{v['factor']}" if "factor" in v else ""
        return f"{kind}:{v['start']}..{v['stop']}{mod}"
    raise ValueError("no levels: give steps: [..] or start/stop (with factor or step)")


def _check_ladder(v: str) -> str:
    """The ladder with its levels written out (concurrency:1..8 -> concurrency:1,2,4,8)."""
    if v:
        try:
            return parse_ladder(v).spec()
        except PlanError as e:
            raise ValueError("; ".join(e.problems)) from None
    return v


def _check_api(v: str) -> str:
    if v not in API_NAMES:
        raise ValueError(f"unknown API {v!r}{suggest(v, API_NAMES)}; one of {', '.join(API_NAMES)}")
    return v


def _check_format(v: str) -> str:
    if v and v not in FORMATS and not is_session_format(v):
        known = FORMATS + SESSION_FORMATS
        raise ValueError(f"unknown trace format {v!r}{suggest(v, known + tuple(ALIASES))}; one of {', '.join(known)}")
    return v


def _check_host(v: str) -> str:
    if v and not re.match(r"^https?://[^/\s]+", v):
        raise ValueError(f"expected a URL like http://127.0.0.1:8000, got {v!r}")
    if "@" in v.partition("://")[2].partition("/")[0]:
        # refused, never echoed: user:key@ would be sent in the Host header and shown in every output
        raise ValueError(
            "credentials in the URL (user:password@) are refused: they would be shown in outputs; "
            "put the key in an environment variable and name it with --api-key-env"
        )
    if v:
        _check_port(v)
    return v


def _check_port(url: str) -> None:
    """A port out of range is a usage error (exit 2), not an unreachable target (exit 3)."""
    try:
        port = urlsplit(url).port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raw = url.partition("://")[2].partition("/")[0].rpartition(":")[2]
        raise ValueError(f"port {raw!r} in {url!r}: a port is a number from 1 to 65535")


def _check_run_time(v: str | None) -> str | None:
    """Locust's run time (30s, 5m, 1h30m); a bare number is seconds, by the one rule for bare numbers."""
    if v is not None and not re.fullmatch(r"\s*(\d+h)?\s*(\d+m)?\s*(\d+s?)?\s*", v) or v == "":
        raise ValueError(f"expected a run time like 30s, 5m, 1h30m, got {v!r}")
    if v is not None and v.strip().isdigit():
        opt = next(m for m in Settings.model_fields["run_time"].metadata if isinstance(m, Opt))
        bare_seconds(v, opt.bare_below, units=("s",))  # Locust's run time takes no ms
    if v is not None and not any(c in "123456789" for c in v):
        raise ValueError(f"{v!r}: a run time must be more than 0 (Locust reads 0 as no limit: the run never ends)")
    if v is not None:
        check_bound(run_time_seconds(v) or 0.0, repr(v))  # -t 99999999h: a typo, not a run
    return v


def _input_file(v: str) -> str:
    if v and not Path(v).exists():
        raise ValueError(f"no such file or folder {v}")
    return v


def _image_size(v: str) -> str:
    w, h = parse_size(v)  # ValueError says what is wrong
    return f"{w}x{h}"


def _json_schema_file(v: str) -> str:
    if v:
        load_schema(v)  # ValueError naming the file and what is wrong
    return v


def _percent(v: Any) -> Any:
    """A share written as a percentage ("5%") is its fraction (0.05); the rest pydantic reads."""
    return parse_share(v) if isinstance(v, str) and v.strip().endswith("%") else v


Fraction = Annotated[float, BeforeValidator(_percent), Field(ge=0, le=1), AfterValidator(_finite)]


def _agent_tier(v: str) -> str:
    """`ttft=2s,speed=20,share=90%` (analysis/agents.py parse_tier), kept in its normal form."""
    if not v:
        return ""
    return parse_tier(v).spec()


def _prices(v: Any) -> Any:
    """GPU type -> price of one GPU-hour, from `TYPE=PRICE,...` or a mapping; each >= 0."""
    if v is None or v == "":
        return {}
    if isinstance(v, str):
        items = {}
        for part in filter(None, (p.strip() for p in v.split(","))):
            name, sep, price = part.rpartition("=")
            if not sep or not name.strip():
                raise ValueError(f"bad price {part!r}: expected GPU_TYPE=PRICE, e.g. H200=3.5")
            items[name.strip()] = price.strip()
        v = items
    if not isinstance(v, dict):
        raise ValueError("expected GPU_TYPE=PRICE,... or a mapping of GPU type: price")
    out = {}
    for name, price in v.items():
        try:
            p = float(price)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: expected a price, got {price!r}") from None
        if not (p >= 0 and math.isfinite(p)):
            raise ValueError(f"{name}: a price must be >= 0, got {price!r}")
        out[str(name)] = p
    return out


MIX_KINDS = ("embeddings", "rerank", "score")


def _graded_set(v: str) -> str:
    if v:
        load_graded(v)  # GradedSetError (a ValueError) naming file:line of every bad item
    return v


def _mix(v: Any) -> Any:
    """Request kinds by share of the requests, from `KIND:SHARE,...` or a mapping; the shares of
    embeddings, rerank and score add up to at most 1 (the rest is the --api's own kind)."""
    if v is None or v == "":
        return {}
    if isinstance(v, str):
        items: dict[str, str | float] = {}
        for part in filter(None, (p.strip() for p in v.split(","))):
            name, sep, share = part.partition(":")
            if not sep:
                raise ValueError(f"bad mix item {part!r}: expected KIND:SHARE, e.g. embeddings:0.2")
            items[name.strip()] = share.strip().rstrip("%") if share.strip().endswith("%") else share.strip()
            if share.strip().endswith("%"):
                items[name.strip()] = float(items[name.strip()]) / 100
        v = items
    if not isinstance(v, dict):
        raise ValueError("expected KIND:SHARE,... or a mapping of kind: share")
    out = {}
    for name, share in v.items():
        if name not in MIX_KINDS:
            raise ValueError(
                f"unknown request kind {name!r}{suggest(str(name), MIX_KINDS)}; one of {', '.join(MIX_KINDS)}"
            )
        try:
            f = float(share)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: expected a share between 0 and 1, got {share!r}") from None
        if not 0 <= f <= 1:
            raise ValueError(f"{name}: expected a share between 0 and 1, got {share!r}")
        out[str(name)] = f
    if sum(out.values()) > 1 + 1e-9:
        raise ValueError(f"the shares add up to {sum(out.values()):g}, more than 1")
    return out


def _workers(v: Any) -> Any:
    if isinstance(v, str) and v.strip().lower() == "auto":
        return "auto"
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        raise ValueError(f"expected a number of workers >= 0 or auto, got {v}")
    if isinstance(v, int) and not isinstance(v, bool) and v > sizes.max_local_workers():
        raise ValueError(
            f"{v} local worker processes on {os.cpu_count()} cores: at most {sizes.max_local_workers()} (twice the "
            "cores; more only share them and every figure goes suspect); auto picks what the load needs"
        )
    if isinstance(v, str):
        raise ValueError(f"expected a number of workers or auto, got {v!r}{suggest(v, ['auto'])}")
    return v


DEFAULT_SESSION_HEADERS = ("x-session-id", "x-smg-routing-key", "x-dynamo-session-id")
Route = Literal["round-robin", "random", "least-in-flight", "affinity"]
ROUTES: tuple[str, ...] = get_args(Route)


def _endpoints(v: Any) -> Any:
    """More server URLs: a list (plan), `URL,URL` text, or `@FILE` (one URL a line, # comments)."""
    if v is None or v == "":
        return ""
    if isinstance(v, (list, tuple)):
        items = [str(x).strip() for x in v]
    elif isinstance(v, str) and v.strip().startswith("@"):
        path = v.strip()[1:]
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as e:
            raise ValueError(f"{path}: cannot read the endpoints file: {e.strerror or e}") from None
        items = []
        for n, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if line:
                try:
                    items.append(_check_host(line))
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: {e}") from None
    elif isinstance(v, str):
        items = [x.strip() for x in v.split(",")]
    else:
        raise ValueError("expected URL,URL,... or a list of URLs")
    items = [x.rstrip("/") for x in items if x]
    for x in items:
        _check_host(x)
    if len(set(items)) != len(items):
        raise ValueError("an endpoint is listed twice: " + ", ".join(sorted({x for x in items if items.count(x) > 1})))
    return ",".join(items)


def _model_split(v: str) -> str:
    """`a:0.7,b:0.3` is a weighted split (weights > 0, read as shares of their sum); a name
    with a colon whose tail is not a number (`llama3:8b`) is one model."""
    parse_model_split(v)
    return v


def parse_model_split(v: str) -> list[tuple[str, float]]:
    """[(model, share)], shares adding up to 1; [] for no model; [(v, 1.0)] for one."""
    if not v:
        return []
    if "," not in v and not _weighted(v):
        return [(v, 1.0)]
    out = []
    for part in filter(None, (p.strip() for p in v.split(","))):
        name, weight = part.rsplit(":", 1) if _weighted(part) else (part, "1")
        w = float(weight)
        if not (w > 0 and math.isfinite(w)):
            raise ValueError(f"{part!r}: a model's weight must be > 0")
        out.append((name.strip(), w))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError("a model is listed twice in the split")
    total = sum(w for _, w in out)
    return [(n, w / total) for n, w in out]


def _weighted(part: str) -> bool:
    name, sep, w = part.rpartition(":")
    if not sep or not name:
        return False
    try:
        float(w)
    except ValueError:
        return False
    return True


def _session_headers(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        v = ",".join(str(x) for x in v)
    if isinstance(v, str):
        names = [x.strip() for x in v.split(",") if x.strip()]
        for n in names:
            if n != "default" and not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", n):
                raise ValueError(f"{n!r} is not an HTTP header name")
        return ",".join(names)
    return v


class Settings(BaseModel):
    """The settings of one run. settings.derive reads them (`from_options`: Locust's parsed options;
    `load_plan` + `resolve`: a YAML plan and the command line) and writes them (`to_plan`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)

    # ---- target ----
    host: Annotated[
        Text,
        AfterValidator(_check_host),
        Opt(
            "common",
            "server base URL; none: start the built-in simulator",
            plan="host",
            flag="--host",
            locust="host",
            web=True,
            trust="picks the target",
        ),
    ] = ""
    api: Annotated[
        Text,
        AfterValidator(_check_api),
        Opt(
            "common",
            f"wire format of the server's streaming API: {', '.join(API_NAMES)} (vllm-grpc: vLLM's gRPC server, --host http://HOST:PORT)",
            plan="api",
        ),
    ] = "openai-chat"
    model: Annotated[
        Text,
        AfterValidator(_model_split),
        Opt(
            "common",
            "model name, or a weighted split of models or LoRA adapters, e.g. base:0.7,sql-lora:0.3 (a session keeps "
            "its model; figures per model)",
            plan="model",
            default_text="the first model /v1/models lists",
        ),
    ] = ""
    trace_models: Annotated[
        bool,
        Opt(
            "target",
            "send each record (or session) with the model its trace names (a model column: our JSONL's model, "
            "BurstGPT's Model), else --model's",
            plan="trace_models",
        ),
    ] = False
    endpoints: Annotated[
        Text,
        BeforeValidator(_endpoints),
        Opt(
            "target",
            "more servers beside --host, URL,URL or @FILE (one URL a line); requests spread over them by --route, "
            "figures and /metrics per endpoint",
            plan="endpoints",
            trust="picks the target",
        ),
    ] = ""
    route: Annotated[
        Route,
        Opt(
            "target",
            "how requests spread over several endpoints: round-robin, random, least-in-flight, or affinity (a "
            "session's requests to one endpoint, by a hash of its id)",
            plan="route",
        ),
    ] = "round-robin"
    session_headers: Annotated[
        Text,
        BeforeValidator(_session_headers),
        Opt(
            "target",
            "send each request's session id in these headers, for a router's session affinity (comma-separated; "
            "'default': x-session-id, x-smg-routing-key, x-dynamo-session-id)",
            plan="session_headers",
        ),
    ] = ""
    api_key_env: Annotated[
        Text,
        Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"),
        Opt(
            "common",
            "name of the environment variable holding the API key, sent as each API takes it: "
            "'Authorization: Bearer KEY' (the OpenAI APIs, SGLang, TGI, Triton, llama.cpp, Ollama; vllm-grpc as "
            "'authorization' metadata), 'x-api-key: KEY' (anthropic-messages); masked in every output, never stored",
            plan="api_key_env",
            trust="names the variable whose value is sent as the key",
        ),
    ] = "OPENAI_API_KEY"
    connect_timeout: Annotated[
        Seconds,
        Field(gt=0),
        Opt("requests", "time to open a connection", plan="timeouts.connect", unit="s", bare_below=600.0),
    ] = 10.0
    no_progress_timeout: Annotated[
        Seconds,
        Field(gt=0),
        Opt(
            "requests",
            "time without a byte before a request gives up",
            plan="timeouts.no_progress",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 60.0
    request_timeout: Annotated[
        Seconds,
        Field(gt=0),
        Opt("requests", "time for a whole request", plan="timeouts.request", unit="s", bare_below=3600.0),
    ] = 600.0
    max_head_bytes: Annotated[
        int,
        Field(ge=1024),
        AfterValidator(_at_most(sizes.MAX_LIMIT_BYTES, "bytes a limit may allow (1 GiB)")),
        Opt(
            "requests",
            "largest reply header block accepted (bytes); past it the request is an http_error",
            plan="limits.head_bytes",
        ),
    ] = MAX_HEAD_BYTES
    max_event_bytes: Annotated[
        int,
        Field(ge=1024),
        AfterValidator(_at_most(sizes.MAX_LIMIT_BYTES, "bytes a limit may allow (1 GiB)")),
        Opt(
            "requests",
            "largest single stream event or line accepted (bytes); past it the request is a stream_error",
            plan="limits.event_bytes",
        ),
    ] = MAX_EVENT_BYTES
    max_body_bytes: Annotated[
        int,
        Field(ge=1024),
        AfterValidator(_at_most(sizes.MAX_LIMIT_BYTES, "bytes a limit may allow (1 GiB)")),
        Opt(
            "requests",
            "largest reply body without events accepted (bytes: error bodies, /v1/models)",
            plan="limits.body_bytes",
        ),
    ] = MAX_BODY_BYTES
    preflight: Annotated[
        bool,
        Opt(
            "requests",
            "skip the check that the target answers the API before any load (exit 3 when it does not)",
            plan="checks.preflight",
            flag="--no-preflight",
            negate=True,
        ),
    ] = True
    fail_fast: Annotated[
        bool,
        Opt(
            "requests",
            "run on when every request fails; without it the run stops (exit 3) once the first --fail-fast-after "
            "requests all failed one way, or as many connections failed in a row",
            plan="checks.fail_fast",
            flag="--no-fail-fast",
            negate=True,
        ),
    ] = True
    fail_fast_after: Annotated[
        int,
        Field(ge=1),
        Opt("requests", "how many failed requests make a fail-fast stop", plan="checks.fail_fast_after"),
    ] = 20

    # ---- workload ----
    trace: Annotated[
        Text,
        AfterValidator(_input_file),
        Opt(
            "common",
            "workload trace file (docs/traces.md)",
            default_text="the bundled sample of the Azure 2023 conversation trace",
            plan="workload.trace",
            path="in",
        ),
    ] = ""
    trace_format: Annotated[
        Text,
        AfterValidator(_check_format),
        Opt("workload", "force the trace format instead of detecting it", plan="workload.format"),
    ] = ""
    synthetic: Annotated[
        Text,
        BeforeValidator(_synthetic),
        Opt(
            "workload",
            "synthetic workload, e.g. requests=500,input=uniform:100:900,output=128,rate=4 (written beside --results "
            "as a trace)",
            plan="workload.synthetic",
        ),
    ] = ""
    tokenizer: Annotated[
        Text,
        AfterValidator(_input_file),
        Opt(
            "workload",
            "tokenizer.json or HF folder: prompts of exact token length",
            plan="workload.tokenizer",
            path="in",
        ),
    ] = ""
    think_time: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "workload",
            "time between a reply and the next request of a user or conversation",
            plan="workload.think_time",
            unit="s",
            bare_below=60.0,
        ),
    ] = 0.0
    max_in_flight: Annotated[
        int,
        Field(ge=0),
        AfterValidator(_at_most(sizes.MAX_USERS, "requests in flight in one run")),
        Opt("workload", "replay: cap on requests in flight per worker (0: none)", plan="workload.max_in_flight"),
    ] = 0
    max_prefill: Annotated[
        int,
        Field(ge=0),
        AfterValidator(_at_most(sizes.MAX_USERS, "requests in flight in one run")),
        Opt(
            "workload",
            "open loop (replay, rate or speed ladder): at most this many requests per worker without their first "
            "token; a send waits for one (AIPerf's prefill concurrency; 0: none)",
            plan="workload.max_prefill",
        ),
    ] = 0
    cancel: Annotated[
        Text,
        BeforeValidator(_cancel),
        Opt(
            "workload",
            "abort a share of requests from the client, after a delay or N tokens, fixed or drawn (seeded): "
            "SHARE:after=WHEN, e.g. 0.2:after=2s, 0.2:after=10tok, 0.3:after=uniform:1s:4s "
            "(outcome client_cancelled; not a failure, not in latencies)",
            plan="workload.cancel",
        ),
    ] = ""
    rate_curve: Annotated[
        Text,
        BeforeValidator(_rate_curve),
        Opt(
            "workload",
            "open loop: a synthetic workload's arrival rate as a curve of time, e.g. "
            "sine:mean=8,amp=4,period=60s, ramp:from=1,to=10,over=60s or file:RATES.csv (t,rate rows) "
            "(implies --replay; docs/load-shapes.md, Rate curves)",
            plan="workload.rate",
            flag="--rate",
        ),
    ] = ""
    prefix_dist: Annotated[
        Text,
        BeforeValidator(_prefix_dist),
        Opt(
            "workload",
            "a synthetic workload's prefixes (prefix_tokens=N long) drawn from a pool by a popularity law: "
            "zipf:S[:POOL] or bimodal:HOT:SHARE[:POOL] (a pool of 100 unless POOL is given; docs/prompts.md, "
            "Prefix popularity)",
            plan="workload.prefix_dist",
        ),
    ] = ""
    max_idle: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "workload",
            "sessions: cap on a trace's tool and think gaps between a reply and the next turn (0: no cap)",
            plan="workload.sessions.max_idle",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 60.0
    mid_start: Annotated[
        bool,
        Opt(
            "workload",
            "sessions: start the first sessions at a random turn, their earlier turns sent as history, so a run does "
            "not begin with every cache cold",
            plan="workload.sessions.mid_start",
        ),
    ] = False
    cache_bust: Annotated[
        bool,
        Opt(
            "workload",
            "sessions: do not mark each session's first turn with a marker unique to the run (without it a server "
            "may still hold an earlier run's prefixes)",
            plan="workload.sessions.cache_bust",
            flag="--no-cache-bust",
            negate=True,
        ),
    ] = True
    max_tokens: Annotated[
        int,
        Field(ge=0),
        AfterValidator(_at_most(sizes.MAX_TOKENS, "tokens of one request (past any model's context)")),
        Opt("workload", "output tokens per request (0: the trace's)", plan="max_tokens"),
    ] = 0
    max_tokens_cap: Annotated[
        int,
        Field(ge=0),
        AfterValidator(_at_most(sizes.MAX_TOKENS, "tokens of one request (past any model's context)")),
        Opt("workload", "upper bound on the trace's output lengths (0: none)", plan="max_tokens_cap"),
    ] = 0
    force_length: Annotated[
        bool,
        Opt(
            "workload",
            "do not ask the server to emit exactly max_tokens (ignore_eos / min_tokens)",
            plan="force_length",
            flag="--no-force-length",
            negate=True,
        ),
    ] = True
    continuous_usage: Annotated[bool, Opt("workload", "ask vLLM for usage on every chunk", plan="continuous_usage")] = (
        False
    )
    seed: Annotated[int, Opt("workload", "seed for prompt synthesis", plan="seed")] = 0
    images: Annotated[
        int,
        Field(ge=0, le=64),
        Opt(
            "workload",
            "chat: add this many synthetic images to every request (0: the trace's image counts, e.g. Azure 2025 "
            "NumImages)",
            plan="workload.images.count",
        ),
    ] = 0
    image_size: Annotated[
        Text,
        AfterValidator(_image_size),
        Opt("workload", "size of synthetic images, WIDTHxHEIGHT", plan="workload.images.size"),
    ] = "512x512"
    image_format: Annotated[
        Literal["png", "jpeg"],
        Opt("workload", "encoding of synthetic images: png or jpeg", plan="workload.images.format"),
    ] = "png"
    audio: Annotated[
        int,
        Field(ge=0, le=16),
        Opt(
            "workload",
            "chat: add this many synthetic audio clips (seeded 16 kHz WAV, input_audio parts) to every request",
            plan="workload.audio.count",
        ),
    ] = 0
    audio_seconds: Annotated[
        Seconds,
        Field(gt=0, le=600),
        Opt(
            "workload", "length of each synthetic audio clip", plan="workload.audio.seconds", unit="s", bare_below=600.0
        ),
    ] = 2.0
    tools: Annotated[
        int,
        Field(ge=0, le=128),
        Opt(
            "workload",
            "chat: add this many generated tool definitions (JSON-schema functions, seeded) to every request",
            plan="workload.tools.count",
        ),
    ] = 0
    tool_choice: Annotated[
        Literal["auto", "required"],
        Opt("workload", "with --tools: the tool_choice asked for, auto or required", plan="workload.tools.choice"),
    ] = "auto"
    response_format: Annotated[
        Text,
        AfterValidator(_json_schema_file),
        Opt(
            "workload",
            "structured output: a JSON schema file sent as response_format json_schema; the run reports the share of "
            "replies that parse and validate",
            plan="workload.response_format",
            path="in",
        ),
    ] = ""
    mix: Annotated[
        dict[str, float],
        BeforeValidator(_mix),
        Opt(
            "workload",
            "send other request kinds beside the --api's, by share: embeddings:0.2,rerank:0.1 (the rest: --api); "
            "each record's text becomes their input; figures per kind beside the total",
            plan="workload.mix",
        ),
    ] = {}
    graded: Annotated[
        Text,
        AfterValidator(_graded_set),
        Opt(
            "workload",
            "accuracy under load: a graded prompt set (JSONL: prompt or messages, expected, grader "
            "exact|regex|number|choice) or 'builtin'; a share of the requests (--graded-share) are its items, graded "
            "per step (docs/verdicts.md)",
            plan="workload.graded.set",
        ),
    ] = ""
    graded_share: Annotated[
        Fraction,
        Opt(
            "workload",
            "with --graded: the share of requests that are graded items (seeded draw)",
            plan="workload.graded.share",
        ),
    ] = 0.1
    graded_max_tokens: Annotated[
        int,
        Field(ge=1),
        AfterValidator(_at_most(sizes.MAX_TOKENS, "tokens of one request (past any model's context)")),
        Opt(
            "workload", "with --graded: max_tokens of a graded item without its own", plan="workload.graded.max_tokens"
        ),
    ] = 32

    # ---- load shape ----
    users: Annotated[
        int | None,
        Field(ge=1),
        AfterValidator(_at_most(sizes.MAX_USERS, "users in one run (a cluster of 200 processes)")),
        Opt(
            "common",
            f"closed loop: concurrent users (at most {sizes.MAX_USERS}; `llm-locust run`: at most "
            f"{sizes.MAX_STREAMS_PER_PROCESS} a local process)",
            default_text="8 (plain Locust: its own)",
            plan="load.users",
            short="-u",
            locust="num_users",
            web=True,
        ),
    ] = None
    spawn_rate: Annotated[
        Number | None,
        Field(gt=0),
        Opt(
            "load",
            "closed loop: users started per second",
            default_text="all at once",
            plan="load.spawn_rate",
            short="-r",
            locust="spawn_rate",
            web=True,
        ),
    ] = None
    run_time: Annotated[
        Text | None,
        BeforeValidator(_text),
        AfterValidator(_check_run_time),
        Opt(
            "common",
            "stop after this long, e.g. 30s, 5m, 1h30m: a closed loop's length (replays and ladders end by "
            "themselves); with --web, each test started from the UI stops this long after its start (a bare number "
            "is seconds, below 86400)",
            default_text="15s",
            plan="load.run_time",
            short="-t",
            locust="run_time",
            web=True,
            bare_below=86400.0,
        ),
    ] = None
    replay: Annotated[
        bool,
        Opt(
            "common",
            "open loop: send each trace record at its timestamp, whatever the replies do",
            plan="replay.enabled",
        ),
    ] = False
    speed: Annotated[
        Number, Field(gt=0), Opt("load", "replay: trace time runs this many times faster", plan="replay.speed")
    ] = 1.0
    start_offset: Annotated[
        Seconds,
        Field(ge=0),
        Opt("load", "replay: skip this much trace time", plan="replay.start_offset", unit="s", bare_below=31536000.0),
    ] = 0.0
    duration: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "load",
            "replay: trace time to replay (0: to the end)",
            plan="replay.duration",
            unit="s",
            bare_below=31536000.0,
        ),
    ] = 0.0
    loops: Annotated[
        int,
        Field(ge=1),
        AfterValidator(_at_most(sizes.MAX_LOOPS, "passes a replay schedules (a longer trace instead)")),
        Opt("load", "replay: passes over the trace window", plan="replay.loops"),
    ] = 1
    run_warmup: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "load",
            "closed loop and replay: what is sent in this first part of the load (a replay: of trace time) is "
            "warm-up: sent, answered and counted apart (the summary's warm-up line, results `warmup`), left out "
            "of every figure of the run (a ladder warms up each step: --warmup)",
            plan="load.run_warmup",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 0.0
    warmup_requests: Annotated[
        int,
        Field(ge=0),
        AfterValidator(_at_most(sizes.MAX_USERS, "warm-up requests (a time instead: --run-warmup)")),
        Opt(
            "load",
            "closed loop: each user's first N requests (its first opens its connection) are warm-up, as "
            "--run-warmup says (a replay's warm-up is trace time: --run-warmup)",
            plan="load.warmup_requests",
        ),
    ] = 0
    ladder: Annotated[
        Text,
        BeforeValidator(_ladder_spec),
        AfterValidator(_check_ladder),
        Opt(
            "common",
            "stepped load, e.g. concurrency:1..64, rate:1..16:+1, speed:0.5,1,2 (docs/load-shapes.md)",
            plan="ladder",
        ),
    ] = ""
    warmup: Annotated[
        Seconds,
        Field(ge=0),
        Opt("ladder", "ladder: discarded at the start of each step", plan="ladder.warmup", unit="s", bare_below=3600.0),
    ] = DEFAULT_WARMUP
    step_duration: Annotated[
        Seconds,
        Field(gt=0),
        Opt(
            "ladder", "ladder: length of a step, warm-up included", plan="ladder.duration", unit="s", bare_below=3600.0
        ),
    ] = DEFAULT_DURATION
    step_requests: Annotated[
        int,
        Field(ge=0),
        Opt(
            "ladder",
            "ladder: end a step's measurement after this many requests (0: on time only)",
            plan="ladder.requests",
        ),
    ] = 0
    refine: Annotated[
        int,
        Field(ge=0, le=sizes.MAX_REFINE),
        Opt(
            "ladder",
            "ladder: after its steps, at most this many more between the two loads around the knee, until the "
            "knee's load is known within 10% (1 user on a concurrency ladder) (0: off; docs/verdicts.md)",
            plan="ladder.refine",
        ),
    ] = 0
    stable_window: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "ladder",
            "ladder: extend a step until throughput over windows of this length is stable (0: off)",
            plan="ladder.stable.window",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 0.0
    stable_tolerance: Annotated[
        float,
        Field(gt=0, lt=1),
        Opt("ladder", "ladder: stability tolerance, a fraction of the mean", plan="ladder.stable.tolerance"),
    ] = 0.05
    stable_max_extend: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "ladder",
            "ladder: at most this much extension per step",
            plan="ladder.stable.max_extend",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 0.0
    stable_windows: Annotated[
        int, Field(ge=2), Opt("ladder", "ladder: how many windows must agree", plan="ladder.stable.windows")
    ] = 3
    arrivals: Annotated[
        Arrivals,
        Opt(
            "ladder",
            "rate ladder: inter-arrival times, poisson, constant or gamma (with --burstiness)",
            plan="ladder.arrivals",
        ),
    ] = "poisson"
    arrivals_burstiness: Annotated[
        float,
        Field(ge=MIN_BURSTINESS, le=MAX_BURSTINESS),
        Opt(
            "ladder",
            "rate ladder: gamma inter-arrival times of this shape, mean 1/rate (vLLM's --burstiness): "
            "1 = Poisson, below 1 burstier, above 1 smoother",
            plan="ladder.burstiness",
            flag="--burstiness",
        ),
    ] = 1.0
    early_stop: Annotated[
        bool,
        Opt("ladder", "ladder: always run every step", plan="early_stop.enabled", flag="--no-early-stop", negate=True),
    ] = True
    max_error_rate: Annotated[
        Fraction, Opt("ladder", "ladder: stop after a step above this error rate", plan="early_stop.max_error_rate")
    ] = 0.05
    flat_steps: Annotated[
        int,
        Field(ge=0),
        Opt(
            "ladder",
            "ladder: stop after this many steps without throughput growth (0: never)",
            plan="early_stop.flat_steps",
        ),
    ] = 2
    flat_tolerance: Annotated[
        Fraction, Opt("ladder", "ladder: growth below this fraction counts as flat", plan="early_stop.flat_tolerance")
    ] = 0.05
    grid: Annotated[
        Text,
        BeforeValidator(grid_text),
        Opt(
            "ladder",
            "run the ladder or SLA search once per cell of input x output lengths, e.g. isl=128,1024:osl=128,1024 "
            "(RESULTS.cell-isl128-osl1024.json each), then the grid's table and heatmaps (docs/grid.md)",
            plan="grid",
            run_only=True,
        ),
    ] = ""
    overlong_share: Annotated[
        Fraction,
        Opt(
            "verdicts",
            "overlong mix: this share of requests (chosen by record, seeded) gets a prompt past the server's context "
            "(0: off)",
            plan="stability.overlong.share",
        ),
    ] = 0.0
    overlong_tokens: Annotated[
        int,
        Field(ge=0),
        AfterValidator(_at_most(sizes.MAX_TOKENS, "tokens of one request (past any model's context)")),
        Opt(
            "verdicts",
            "overlong mix: prompt tokens of those requests (0: the server's context from /v1/models max_model_len or "
            "llama.cpp /props n_ctx, plus 10%)",
            plan="stability.overlong.tokens",
        ),
    ] = 0
    overlong_baseline: Annotated[
        Text,
        Opt(
            "verdicts",
            "overlong mix: a clean run's results file; the other requests' TTFT and E2E p50 must stay within "
            "--overlong-tolerance of its",
            plan="stability.overlong.baseline",
            path="in",
        ),
    ] = ""
    overlong_tolerance: Annotated[
        float,
        Field(ge=0),
        Opt(
            "verdicts",
            "overlong mix: how far the others' p50 may rise over the baseline's, a fraction (0.1 = 10%)",
            plan="stability.overlong.tolerance",
        ),
    ] = 0.10
    kv_pressure: Annotated[
        bool,
        Opt(
            "verdicts",
            "ladder: the KV-pressure verdict: the load where the server starts preempting (its /metrics) and ITL "
            "before vs at it",
            plan="stability.kv_pressure.enabled",
        ),
    ] = False
    kv_min_load: Annotated[
        float,
        Field(ge=0),
        Opt(
            "verdicts",
            "KV-pressure verdict: pass when preemption starts at this load or above (0: pass only without preemption)",
            plan="stability.kv_pressure.min_load",
        ),
    ] = 0.0
    burst_recovery: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "verdicts",
            "burst ladder: pass when TTFT p50 is back within 10% of the base step's this soon after the burst (0: "
            "within the run)",
            plan="stability.burst_recovery",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 0.0
    soak_window: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "verdicts",
            "soak verdict: windows of this length (e.g. 1m) for latency drift, error bursts and memory growth over "
            "the whole run (0: off)",
            plan="stability.soak.window",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 0.0
    soak_max_drift: Annotated[
        float,
        Field(ge=0),
        Opt(
            "verdicts",
            "soak verdict: the most TTFT / ITL p50 may drift per hour, a fraction of its mean (0.1 = 10%/h)",
            plan="stability.soak.max_drift",
        ),
    ] = 0.10
    soak_max_error_rate: Annotated[
        Fraction,
        Opt(
            "verdicts",
            "soak verdict: a window above this error rate is an error burst",
            plan="stability.soak.max_error_rate",
        ),
    ] = 0.05
    soak_max_memory_growth: Annotated[
        float,
        Field(ge=0),
        Opt(
            "verdicts",
            "soak verdict: the most the server's resident memory and GPU memory may grow, in MiB per hour (0: "
            "reported, not judged)",
            plan="stability.soak.max_memory_growth",
        ),
    ] = 0.0
    stop_on_slo: Annotated[
        bool, Opt("ladder", "ladder: stop at the first step that breaks an SLO", plan="early_stop.on_slo")
    ] = False
    workers: Annotated[
        int | Literal["auto"],
        BeforeValidator(_workers),
        Opt(
            "run",
            "run N local worker processes under a master (0: one process); auto: as many as the planned load needs, "
            "at most the cores less one",
            plan="workers",
            run_only=True,
        ),
    ] = "auto"
    stream_rate: Annotated[
        float,
        Field(ge=0),
        Opt(
            "run",
            "output tokens/s one stream is expected to get from the server, for --workers auto's plan "
            "(the planned streams times this is the token rate the processes must take)",
            default_text="50",
            plan="stream_rate",
            run_only=True,
        ),
    ] = 0.0
    locustfile: Annotated[
        Text,
        Opt(
            "run",
            "a locustfile of your own (docs/scenarios.md)",
            default_text="the bundled one for the mode (closed loop, --replay, --ladder)",
            plan="locustfile",
            short="-f",
            path="in",
            run_only=True,
            trust="imports Python code",
        ),
    ] = ""
    trust_plan: Annotated[
        bool,
        Opt(
            "run",
            "take the plan's or results file's target (host, endpoints, metrics URLs), key variable, reset hook, "
            "locustfile, MLflow server, web UI origins, exporter address and record log, and let it name outputs "
            "over existing files; "
            "without it a file is data: those are ignored (or the run refused), each named, unless given here",
            run_only=True,
        ),
    ] = False
    web: Annotated[
        bool,
        Opt(
            "common",
            "start Locust's web UI (on 127.0.0.1) and wait for Start instead of running headless; the run ends "
            "when its test ends (-t reached, the ladder or replay done, Stop pressed), as a headless one would",
            run_only=True,
        ),
    ] = False
    web_keep_open: Annotated[
        bool,
        Opt(
            "run",
            "--web: keep the web UI open when a test ends, for more tests from it; Ctrl-C then ends the run "
            "(marked interrupted, exit 130)",
            run_only=True,
        ),
    ] = False
    web_origins: Annotated[
        Text,
        Opt(
            "run",
            "web UI behind a reverse proxy with a name of its own: its origins (scheme://host[:port], comma-"
            "separated) may start and stop runs (docs/security.md)",
            plan="web.origins",
            trust="lets that site's pages start and stop runs",
        ),
    ] = ""
    repeat: Annotated[
        int,
        Field(ge=1),
        Opt(
            "repeat",
            "run the whole plan N times: each a normal run (RESULTS.repK.json), then every headline figure's mean "
            "and 95% t-interval in the combined results (docs/verdicts.md)",
            plan="repeat.count",
            run_only=True,
        ),
    ] = 1
    reset_hook: Annotated[
        Text,
        Opt(
            "repeat",
            "a shell command run before each repetition (e.g. restart the server); a non-zero exit stops the series",
            plan="repeat.reset_hook",
            run_only=True,
            trust="runs a shell command",
        ),
    ] = ""
    reset_cache: Annotated[
        Literal["off", "repeat", "step"],
        Opt(
            "repeat",
            "empty the server's prefix cache: repeat = before the load of the run (and of each repetition), step = "
            "also between ladder steps (docs/cache-control.md)",
            plan="repeat.reset_cache",
        ),
    ] = "off"
    prefix_hit: Annotated[
        Fraction,
        Opt(
            "repeat",
            "a closed loop at a controlled prefix-cache hit ratio: with --synthetic (input=N fixed), every prompt "
            "begins with the same R x N tokens; the server's cache is emptied before the load and primed by each "
            "user's first request (warm-up); the hit ratio the server's counters report is checked against R "
            "(docs/cache-control.md)",
            plan="repeat.prefix_hit",
        ),
    ] = 0.0
    baseline: Annotated[
        Text,
        Opt(
            "repeat",
            "compare this run's results (with --repeat N >= 2: the combined results) with this baseline "
            "results file (compare's regression gate, by the 95% intervals) and exit 1 when a figure worsens "
            "beyond noise and --tolerance",
            plan="repeat.baseline",
            path="in",
            run_only=True,
        ),
    ] = ""
    tolerance: Annotated[
        Text,
        Opt(
            "repeat",
            "with --baseline: how much worse a figure may be besides its noise (5%; 0: any significant worsening "
            "fails)",
            plan="repeat.tolerance",
            run_only=True,
        ),
    ] = "5%"
    junit: Annotated[
        Text,
        Opt(
            "repeat",
            "write the run's gates (error rate, answered, SLO attainment, SLA search) as JUnit XML test cases "
            "here; with --baseline, the regression gate's",
            plan="repeat.junit",
            path="out",
        ),
    ] = ""

    # ---- SLOs ----
    slo: Annotated[
        dict[str, float],
        BeforeValidator(parse_slos),
        Opt(
            "common",
            "SLOs, e.g. ttft=500ms,tpot=50ms,ttft_p50=0.2s,error_rate=1%; latency limits take a unit, a bare number "
            "is seconds and must be below 10 (docs/load-shapes.md)",
            plan="slos",
        ),
    ] = {}

    slo_attainment: Annotated[
        Fraction,
        Opt(
            "verdicts",
            "with --slo, a run (not a ladder) fails (exit 1) when fewer of its answered requests than this met every "
            "SLO (0.95: the field's convention; 0: never)",
            plan="slo_attainment",
        ),
    ] = 0.95
    precision: Annotated[
        dict[str, float],
        BeforeValidator(_precision),
        Opt(
            "load",
            "stop when precise: end the run (a ladder: each step) once every named figure's 95% interval is "
            "within its target, e.g. ttft.p99=2%,itl.mean=1%; bounded by -t (a step: its duration); a target not "
            "met is marked in the results and the summary (docs/load-shapes.md)",
            plan="precision",
        ),
    ] = {}

    # ---- outputs ----
    name: Annotated[Text, Opt("outputs", "the run's name, shown in the results and the report", plan="name")] = ""
    progress_interval: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "outputs",
            "a headless run prints a progress line this often (0: never)",
            plan="outputs.progress_interval",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 10.0
    checkpoint_every: Annotated[
        Seconds,
        Field(ge=0),
        Opt(
            "outputs",
            "with --results, write the results so far this often while the run goes, marked partial, so that a "
            "run killed at any time (SIGKILL, a lost machine) leaves them; the end's write replaces them (0: never)",
            plan="outputs.checkpoint_every",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 60.0
    mlflow: Annotated[
        Text,
        Opt(
            "outputs",
            "log the run to this MLflow tracking server (http://HOST:5000): the plan as parameters, the figures as "
            "metrics (ladder steps as MLflow steps), the results, report and record log as artifacts "
            "(pip install 'llm-locust[mlflow]')",
            plan="mlflow.uri",
            trust="sends the run's figures and files to that server",
        ),
    ] = ""
    mlflow_experiment: Annotated[
        Text,
        Opt("outputs", "the MLflow experiment to log into", plan="mlflow.experiment", default_text="llm-locust"),
    ] = ""
    mlflow_run_name: Annotated[
        Text,
        Opt("outputs", "the MLflow run's name", plan="mlflow.run_name", default_text="the run's --name, else MLflow's"),
    ] = ""
    mlflow_timeout: Annotated[
        Seconds,
        Field(gt=0),
        Opt(
            "outputs",
            "the most time logging to MLflow may take, the whole upload; then it is abandoned, the run's files "
            "and exit code stand",
            plan="mlflow.timeout",
            unit="s",
            bare_below=3600.0,
        ),
    ] = 30.0
    locust_stats: Annotated[
        bool,
        Opt(
            "outputs",
            "llm-locust run: print Locust's own end-of-run tables too (requests, percentiles and errors by "
            "response time, beside the llm-locust summary)",
            plan="outputs.locust_stats",
        ),
    ] = False
    description: Annotated[
        Text, Opt("outputs", "a line on what the run is for, shown in the report", plan="description")
    ] = ""
    results: Annotated[Text, Opt("common", "write the results JSON to this path", plan="results", path="out")] = ""
    report: Annotated[
        Text, Opt("common", "write the HTML report of the run to this path", plan="report", path="out")
    ] = ""
    record_log: Annotated[
        Text,
        AfterValidator(_record_log_name),
        Opt(
            "outputs",
            "write one JSON line per finished request to this file, .jsonl (an earlier run's is replaced; workers "
            "add .workerN)",
            plan="record_log",
            path="out",
            trust="names where every request's record is written",
        ),
    ] = ""

    # ---- observability ----
    server_metrics: Annotated[
        Text,
        Opt(
            "observe",
            "the inference server's Prometheus URL ('off': none)",
            default_text="HOST/metrics",
            plan="observe.server_metrics",
            trust="picks a URL to read",
        ),
    ] = ""
    gpu_metrics: Annotated[
        Text,
        Opt(
            "observe",
            "the GPU sidecar's URL (llm-locust gpu-sidecar), read beside each step",
            plan="observe.gpu_metrics",
            trust="picks a URL to read",
        ),
    ] = ""
    metrics_interval: Annotated[
        Seconds,
        Field(gt=0),
        Opt(
            "observe",
            "mean time between reads of the server and GPU metrics (each read moved by up to a quarter of it)",
            plan="observe.interval",
            unit="s",
            bare_below=60.0,
        ),
    ] = 2.0
    prometheus_port: Annotated[
        int,
        Field(ge=0, le=65535),
        Opt(
            "observe",
            "serve the run's Prometheus metrics on this port (master / local; 0: off)",
            plan="observe.prometheus_port",
        ),
    ] = 0
    prometheus_host: Annotated[
        Text,
        Opt(
            "observe",
            "address for --prometheus-port",
            plan="observe.prometheus_host",
            trust="listens on that address: other machines may read the run's figures",
        ),
    ] = "127.0.0.1"

    # ---- efficiency and cost ----
    gpus: Annotated[
        int | None,
        Field(ge=1),
        Opt(
            "cost", "GPUs serving the model: output tokens/s per GPU and the Pareto frontier per step", plan="cost.gpus"
        ),
    ] = None
    prefill_gpus: Annotated[
        int | None,
        Field(ge=1),
        Opt(
            "cost",
            "disaggregated serving: GPUs doing prefill (input tokens/s are divided by these)",
            plan="cost.prefill_gpus",
        ),
    ] = None
    decode_gpus: Annotated[
        int | None,
        Field(ge=1),
        Opt(
            "cost",
            "disaggregated serving: GPUs doing decode (output tokens/s are divided by these)",
            plan="cost.decode_gpus",
        ),
    ] = None
    gpu_hour_price: Annotated[
        Number | None,
        Field(ge=0),
        Opt(
            "cost",
            "price of one GPU-hour: $ per million output (and total) tokens per step and at the knee",
            plan="cost.gpu_hour_price",
        ),
    ] = None
    gpu_prices: Annotated[
        dict[str, float],
        BeforeValidator(_prices),
        Opt(
            "cost",
            "prices per GPU type, e.g. H200=3.5,A100=1.8 (the GPU sidecar names the type; used before "
            "--gpu-hour-price)",
            plan="cost.gpu_prices",
        ),
    ] = {}

    gpu_power_w: Annotated[
        Number | None,
        Field(gt=0),
        Opt(
            "cost",
            "power of one GPU in W, for agents per megawatt (--agent-tier) when no GPU sidecar measured it",
            plan="cost.gpu_power_w",
        ),
    ] = None
    agent_tier: Annotated[
        str,
        AfterValidator(_agent_tier),
        Opt(
            "ladder",
            "agents under an SLO tier (AA-AgentPerf's verdict): with --ladder sla:concurrency, a probe also "
            "needs this share of its sessions to meet the tier, e.g. ttft=2s,speed=20,share=90% (median TTFT "
            "per session, output tokens/s per session; docs/verdicts.md)",
            plan="agent_tier",
        ),
    ] = ""

    # ---- simulator ----
    sim_slots: Annotated[
        int,
        Field(ge=1),
        AfterValidator(_at_most(sizes.MAX_SIM_SLOTS, "simulator slots")),
        Opt("sim", "simulator batch slots", plan="sim.slots", run_only=True),
    ] = 8
    sim_fast: Annotated[
        bool, Opt("sim", "simulator without pacing (client throughput tests)", plan="sim.fast", run_only=True)
    ] = False
    sim_graded_accuracy: Annotated[
        Fraction,
        Opt(
            "sim",
            "with --graded: the simulator answers a graded item right with this probability (seeded), else wrong",
            plan="sim.graded_accuracy",
            run_only=True,
        ),
    ] = 1.0

    def _prefix_hit_problems(self) -> list[tuple[str, str]]:
        """--prefix-hit shapes a synthetic workload of one input length (its prefix set here), or
        checks a trace's prompts as they are (one an earlier --prefix-hit run wrote); a closed loop."""
        if not self.prefix_hit:
            return []
        if self.reset_cache == "step" or self.ladder or self.replay:
            return [("prefix_hit", "a closed loop: one flush, each user's first request to prime, one measure")]
        if not self.synthetic:
            if self.trace:
                return []
            return [("prefix_hit", "shapes the prompts of a synthetic workload: give --synthetic input=N,...")]
        spec = parse_spec_text(self.synthetic)
        if not str(spec.input).strip().isdigit():
            return [("prefix_hit", f"needs one input length (input=N), not {spec.input!r}: R x N tokens are shared")]
        if spec.prefix_tokens:
            return [("prefix_hit", "sets the shared prefix itself: drop prefix_tokens from --synthetic")]
        return []

    def _warmup_problems(self) -> list[tuple[str, str]]:
        """A run's warm-up (--run-warmup, --warmup-requests) is not a ladder's (per step: --warmup)."""
        if self.ladder and (self.run_warmup or self.warmup_requests):
            which = "run_warmup" if self.run_warmup else "warmup_requests"
            return [(which, "a ladder warms up at the start of each step: give --warmup (per step) instead")]
        if self.replay and self.warmup_requests:
            return [("warmup_requests", "a replay's warm-up is trace time: give --run-warmup (e.g. 30s)")]
        return []

    def _precision_problems(self) -> list[tuple[str, str]]:
        """--precision on a goodput rate needs an SLO (without one it is 0: never precise), and a
        burst's or a rate series' steps last exactly as written (no target can end them)."""
        goodput = [name for name in self.precision if name.startswith("goodput_")]
        if goodput and not self.request_slos:
            return [
                ("precision", f"{goodput[0]} counts the requests that met every SLO: give a --slo, e.g. ttft=500ms")
            ]
        if self.precision and self.ladder:
            ld = parse_ladder(self.ladder)
            if ld.burst is not None or ld.durations:
                return [("precision", "a burst's or a rate series' steps last exactly as written: drop --precision")]
        return []

    def _prefix_dist_problems(self) -> list[tuple[str, str]]:
        """--prefix-dist draws a synthetic workload's prefixes: they need a length."""
        if not self.prefix_dist:
            return []
        if not self.synthetic or not parse_spec_text(self.synthetic).prefix_tokens:
            return [("prefix_dist", "draws a synthetic workload's prefixes: give --synthetic ...,prefix_tokens=N")]
        if self.prefix_hit:
            return [("prefix_dist", "one prefix law at a time: --prefix-hit shares one prefix, not with --prefix-dist")]
        return []

    def _rate_curve_problems(self) -> list[tuple[str, str]]:
        """--rate shapes a synthetic workload's arrivals, once, in an open loop of its own."""
        if not self.rate_curve:
            return []
        if not self.synthetic:
            return [("rate_curve", "a rate curve shapes a synthetic workload's arrivals: give --synthetic too")]
        if parse_spec_text(self.synthetic).rate > 0:
            return [("rate_curve", "give the rate once: --rate, or the synthetic workload's rate=, not both")]
        if self.ladder:
            return [("rate_curve", "a ladder sets its own load per step: not with --rate")]
        return []

    def cross_problems(self) -> list[tuple[str, str]]:
        """(field, what) for each rule between fields that this combination breaks."""
        problems = self._warmup_problems() + self._prefix_hit_problems() + self._rate_curve_problems()
        problems += self._prefix_dist_problems() + self._precision_problems()
        if self.trace and self.synthetic:
            problems.append(("trace", "give a trace or a synthetic workload, not both"))
        if (self.prefill_gpus is None) != (self.decode_gpus is None):
            problems.append(("prefill_gpus", "disaggregated serving needs both --prefill-gpus and --decode-gpus"))
        if self.max_tokens and self.max_tokens_cap and self.max_tokens > self.max_tokens_cap:
            problems.append(("max_tokens", f"{self.max_tokens} is above max_tokens_cap {self.max_tokens_cap}"))
        if self.tolerance != "5%" and not self.baseline:
            problems.append(("tolerance", "only used with --baseline (repeat.baseline)"))
        if self.junit and self.repeat > 1 and not self.baseline:
            problems.append(("junit", "with --repeat, the JUnit file holds --baseline's regression gate: give one"))
        if self.tolerance != "5%":
            try:
                parse_tolerance(self.tolerance)
            except ValueError as e:
                problems.append(("tolerance", str(e)))
        problems += self._grid_problems() + self._web_problems()
        problems += self._arrival_problems()
        problems += self._cache_reset_problems()
        problems += self._cancel_problems()
        problems += self._refine_problems()
        if self.ladder:
            ld = parse_ladder(self.ladder)
            window = self.step_duration - self.warmup
            if self.warmup >= self.step_duration and not ld.durations:  # a series: _arrival_problems
                problems.append(
                    (
                        "warmup",
                        f"{self.warmup:g} s is not shorter than the step duration "
                        f"({self.step_duration:g} s, warm-up included): nothing would be measured",
                    )
                )
            elif self.stable_window and self.stable_window > window:
                problems.append(
                    (
                        "stable_window",
                        f"{self.stable_window:g} s is longer than the measurement window "
                        f"(duration - warmup = {window:g} s)",
                    )
                )
            if ld.burst is not None and ld.burst.before is not None and self.warmup >= ld.burst.before:
                problems.append(
                    (
                        "warmup",
                        f"{self.warmup:g} s is not shorter than the burst's base step (before="
                        f"{ld.burst.before:g}s, warm-up included): no baseline would be measured",
                    )
                )
            if self.users is not None or self.spawn_rate is not None:
                problems.append(
                    (
                        "users",
                        "a ladder sets the users of each step itself: drop -u/--users and -r/--spawn-rate "
                        "(load.users, load.spawn_rate)",
                    )
                )
            if ld.kind == "speed" and self.synthetic and not re.search(r"(^|,)rate=0*[1-9.]", self.synthetic):
                problems.append(
                    (
                        "ladder",
                        "a speed ladder replays arrival times: the synthetic workload needs rate > 0 (or use a trace)",
                    )
                )
        return problems

    def _cache_reset_problems(self) -> list[tuple[str, str]]:
        """--reset-cache step: between the steps of a rate or concurrency ladder (a speed ladder's
        replay goes on across its steps); the reset endpoints are HTTP."""
        if self.reset_cache == "off":
            return []
        if self.api in GRPC_APIS:
            return [("reset_cache", f"the cache reset endpoints are HTTP: not with --api {self.api}")]
        if self.reset_cache != "step":
            return []
        kind = parse_ladder(self.ladder).kind if self.ladder else None
        if kind not in ("rate", "concurrency"):
            return [
                (
                    "reset_cache",
                    "step resets between the steps of a rate or concurrency ladder (--ladder rate:... or "
                    "concurrency:...); for one run use --reset-cache repeat",
                )
            ]
        return []

    def _refine_problems(self) -> list[tuple[str, str]]:
        """--refine adds steps around a ladder's knee: a plain ladder's (not a search, a burst or a series)."""
        if not self.refine:
            return []
        ld = parse_ladder(self.ladder) if self.ladder else None
        if ld is None:
            return [("refine", "refines the knee of a ladder: give --ladder (e.g. --ladder concurrency:1..32)")]
        if ld.search is not None or ld.profile:
            what = (
                "an SLA search chooses its own loads"
                if ld.search is not None
                else "a burst or a rate series has no knee"
            )
            return [("refine", f"not with --ladder {self.ladder}: {what}")]
        return []

    def _cancel_problems(self) -> list[tuple[str, str]]:
        """--cancel is carried out by the HTTP client (transport/http.py), whoever sends."""
        if self.cancel and self.api in GRPC_APIS:
            return [("cancel", f"not for a gRPC API ({self.api}): the HTTP APIs only")]
        return []

    def _arrival_problems(self) -> list[tuple[str, str]]:
        """--burstiness and --max-prefill against the load they shape (workload.arrivals)."""
        problems = []
        ld = parse_ladder(self.ladder) if self.ladder else None
        kind = ld.kind if ld is not None else None
        if ld is not None and ld.durations:  # a rate series: its steps' own lengths, the warm-up in the first
            problems += self._series_problems(ld.durations[0])
        if self.arrivals_burstiness != 1.0:
            if kind != "rate":
                problems.append(
                    (
                        "arrivals_burstiness",
                        "shapes a rate ladder's arrivals: give --ladder rate:... (a synthetic trace takes "
                        "burstiness= in --synthetic, with arrivals=gamma)",
                    )
                )
            elif self.arrivals == "constant":
                problems.append(
                    (
                        "arrivals_burstiness",
                        f"{self.arrivals_burstiness:g} shapes random arrivals: drop --burstiness, or use "
                        "--arrivals gamma (or poisson) instead of constant",
                    )
                )
        if self.max_prefill and self.mode != "replay" and kind not in ("rate", "speed"):
            problems.append(
                (
                    "max_prefill",
                    "caps an open loop's sends: use it with --replay or --ladder rate:/speed: (a closed loop's "
                    "users already bound what is in flight)",
                )
            )
        return problems

    def _series_problems(self, first: float) -> list[tuple[str, str]]:
        """A rate series (rate:R@T,...): the warm-up within its first step; no request count or
        stability rule (its steps last exactly as written)."""
        problems = []
        if self.warmup >= first:
            problems.append(
                (
                    "warmup",
                    f"{self.warmup:g} s is not shorter than the series' first step ({first:g} s, warm-up "
                    "included): nothing of it would be measured",
                )
            )
        for name, flag in (("step_requests", "--step-requests"), ("stable_window", "--stable-window")):
            if getattr(self, name):
                problems.append((name, f"a rate series' steps last exactly as written: drop {flag}"))
        return problems

    def _web_problems(self) -> list[tuple[str, str]]:
        """--web-keep-open without the web UI would keep nothing open."""
        if self.web_keep_open and not self.web:
            return [("web_keep_open", "keeps the web UI open: give --web too")]
        return []

    def _grid_problems(self) -> list[tuple[str, str]]:
        """--grid: each cell runs this plan's ladder or SLA search on a synthetic workload of the
        cell's lengths (llm_locust.grid_runs), so what would set the lengths, or find no knee, is refused."""
        if not self.grid:
            return []
        if not self.ladder:
            why = "a grid runs a ladder or an SLA search in each cell: give --ladder, e.g. concurrency:1..32"
            return [("grid", why)]
        ld = parse_ladder(self.ladder)
        if ld.burst is not None or ld.durations:
            return [("grid", "a grid finds each cell's knee or SLA load: give a ladder of levels or an sla: search")]
        refused = {
            "trace": "each cell's workload is synthetic, of the cell's lengths: drop --trace (--synthetic sets the "
            "other keys: requests, rate, seed ...)",
            "max_tokens": "the grid sets each cell's output length: drop --max-tokens",
            "max_tokens_cap": "the grid sets each cell's output length: drop --max-tokens-cap",
            "repeat": "a grid with --repeat is not supported: run the grid again",
            "mlflow": "a grid with --mlflow is not supported: log the cells' results files",
            "web": "a grid runs headless, one run per cell: drop --web",
        }
        fields = type(self).model_fields
        return [(name, what) for name, what in refused.items() if getattr(self, name) != fields[name].default]

    # ---- views the runtime reads ----

    @property
    def api_key(self) -> str | None:
        """The key, read from the named variable when asked; never stored in the settings."""
        return os.environ.get(self.api_key_env) or None

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts(connect=self.connect_timeout, no_progress=self.no_progress_timeout, total=self.request_timeout)

    @property
    def limits(self) -> Limits:
        return Limits(head_bytes=self.max_head_bytes, event_bytes=self.max_event_bytes, body_bytes=self.max_body_bytes)

    @property
    def endpoint_list(self) -> list[str]:
        """Every server URL: --host first, then --endpoints (empty when no host was given)."""
        extra = [x for x in self.endpoints.split(",") if x] if self.endpoints else []
        host = self.host.rstrip("/")
        return ([host] if host else []) + [x for x in extra if x != host]

    @property
    def model_split(self) -> list[tuple[str, float]]:
        """[(model, share)] from --model: [] for none, one pair for a single model."""
        return parse_model_split(self.model)

    @property
    def session_header_names(self) -> list[str]:
        names = [x for x in self.session_headers.split(",") if x] if self.session_headers else []
        out: list[str] = []
        for n in names:
            for m in DEFAULT_SESSION_HEADERS if n == "default" else (n,):
                if m not in out:
                    out.append(m)
        return out

    @property
    def slos(self) -> dict[str, float]:
        return self.slo

    @property
    def request_slos(self) -> dict[str, float]:
        """The SLOs a single request can be judged by (goodput)."""
        return request_slos(self.slo)

    @property
    def no_early_stop(self) -> bool:
        return not self.early_stop

    @property
    def trace_path(self) -> str:
        """The trace to load: the given one, or the bundled sample."""
        if self.trace:
            return self.trace
        return str(resources.files("llm_locust") / "data" / "sample_trace.jsonl")

    @property
    def mode(self) -> str:
        return "ladder" if self.ladder else "replay" if self.replay else "closed"

    def early_stop_rule(self):
        return EarlyStop(
            enabled=self.early_stop,
            max_error_rate=self.max_error_rate,
            flat_steps=self.flat_steps,
            flat_tolerance=self.flat_tolerance,
            on_slo=self.stop_on_slo,
        )

    def tokenizer_obj(self):
        """The tokenizer named by --tokenizer, loaded once per process; None without one."""
        if not self.tokenizer:
            return None
        cached = _TOKENIZERS.get(self.tokenizer)
        if cached is None:
            cached = _TOKENIZERS[self.tokenizer] = load_tokenizer(self.tokenizer)
        return cached

    def public(self) -> dict:
        """The settings as kept in the results' run.settings: the key's variable name, never the key."""
        return {
            "api": self.api,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "api_key_set": self.api_key is not None,
            "trace": self.trace_path,
            "trace_format": self.trace_format,
            "tokenizer": self.tokenizer,
            "replay": {
                "speed": self.speed,
                "start_offset": self.start_offset,
                "duration": self.duration,
                "loops": self.loops,
                "max_in_flight": self.max_in_flight,
                "max_prefill": self.max_prefill,
            },
            "think_time": self.think_time,
            "max_tokens": self.max_tokens,
            "max_tokens_cap": self.max_tokens_cap,
            "force_length": self.force_length,
            "continuous_usage": self.continuous_usage,
            "timeouts": {
                "connect": self.connect_timeout,
                "no_progress": self.no_progress_timeout,
                "total": self.request_timeout,
            },
            "slos": dict(self.slo),
            "ladder": {
                "spec": self.ladder,
                "warmup": self.warmup,
                "step_duration": self.step_duration,
                "step_requests": self.step_requests,
                "stable": {
                    "window": self.stable_window,
                    "tolerance": self.stable_tolerance,
                    "max_extend": self.stable_max_extend,
                    "windows": self.stable_windows,
                },
                "arrivals": self.arrivals,
                "burstiness": self.arrivals_burstiness,
                "max_error_rate": self.max_error_rate,
                "early_stop": self.early_stop,
            },
            "seed": self.seed,
        }


_TOKENIZERS: dict[str, object] = {}


def options() -> dict[str, tuple[Any, Opt]]:
    """{field name: (default, Opt)} in declaration order."""
    out = {}
    for name, f in Settings.model_fields.items():
        opt = next(m for m in f.metadata if isinstance(m, Opt))
        out[name] = (f.default, opt)
    return out

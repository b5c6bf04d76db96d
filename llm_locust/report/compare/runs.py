"""The runs: a results file read through read_results, labelled, and the facts the comparison
reads from it (server, model, GPU, trace, load plan, timing, SLOs, validity marks)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from llm_locust.analysis.efficiency import FIGURES, frontier_points, verdicts_for_results
from llm_locust.analysis.steps import OFFERED_UNITS
from llm_locust.report.compare.errors import CompareError
from llm_locust.report.compare.format import _fmt_slo, _load, _num_plain
from llm_locust.schema import LadderDoc, ResultsDoc, Verdicts

SIM_INFO = "llm_locust_sim_info"  # the simulator's info series: its settings as labels (sim/server.py)
DEFAULT_USERS = 8  # `llm-locust run`'s closed-loop default (cli.DEFAULTS), for results that do not say
DEFAULT_RUN_TIME = "15s"


def _get(d: Any, *keys: Any, default: Any = None) -> Any:
    for k in keys:
        if isinstance(d, dict) and k in d:
            d = d[k]
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return default
    return d


def _opt(cmd: list[str], *names: str) -> str | None:
    """The value of the last occurrence of an option in a command line (`-u 8`, `--users=8`)."""
    val = None
    for i, a in enumerate(cmd):
        for n in names:
            if a == n and i + 1 < len(cmd):
                val = cmd[i + 1]
            elif a.startswith(n + "=") and n.startswith("--"):
                val = a[len(n) + 1 :]
    return val


def _number(v: Any) -> Any:
    """A length of a --synthetic spec: a number when it is one ("128"), else the text ("100:200")."""
    try:
        return float(v) if v is not None else None
    except ValueError:
        return v


@dataclass
class Run:
    """One results file and the facts the comparison reads from it."""

    label: str
    path: str
    # ours as read_results gives it; a ForeignRun's: the few parts tools._doc builds, so the facts
    # a ForeignRun shares with Run are read with .get / _get (tolerant of a part it lacks)
    doc: ResultsDoc

    @property
    def summary(self) -> dict[str, Any]:
        """The whole run's figures, with the verdicts' (tok/s/GPU, J/token, $/Mtok ...) beside them."""
        # open by a figure's name (compare's metrics and gates name them), a ForeignRun's too
        base = cast(dict[str, Any], self.doc["summary"])
        run_row = cast("dict[str, Any]", self.verdicts.get("run") if self.verdicts else None) or {}  # by figure name
        extra = {k: v for k, v in run_row.items() if k in FIGURES and k not in base}
        return {**base, **extra} if extra else base

    @cached_property
    def verdicts(self) -> Verdicts | None:
        """results["verdicts"] as the run wrote them, else computed from the results file
        (analysis/efficiency.py: the plan's cost.* keys, the GPU windows, the ladder)."""
        v = self.doc.get("verdicts")
        if isinstance(v, dict) and isinstance(v.get("steps"), list):
            return v
        try:
            return verdicts_for_results(self.doc)
        except (TypeError, ValueError, AttributeError, KeyError):  # a hand-edited file: no verdicts, not a crash
            return None

    @property
    def frontier(self) -> list[tuple[float, float]]:
        """The Pareto frontier's (output tok/s per GPU, tok/s per user) points, by tok/s per GPU."""
        return frontier_points(self.verdicts)

    @property
    def price(self) -> float | None:
        price = self.verdicts.get("price") if self.verdicts else None
        return price["usd_per_gpu_hour"] if price else None

    @property
    def settings(self) -> dict[str, Any]:
        return _get(self.doc, "run", "settings", default={}) or {}

    @property
    def slos(self) -> dict[str, float]:
        return self.settings.get("slos") or {}

    @property
    def ladder(self) -> LadderDoc | None:
        """The ladder section (steps, saturation), or None for a run without one."""
        ld = self.doc.get("ladder")
        return ld if isinstance(ld, dict) and ld.get("steps") else None

    @property
    def ladder_steps(self) -> list[dict[str, Any]]:
        """The ladder's steps, each with its verdict figures (tok/s/GPU, J/token, $/Mtok ...) beside it."""
        ld = self.ladder
        # open by a figure's name (compare's metrics name them): the verdicts' figures join them
        steps = list(cast(list[dict[str, Any]], ld["steps"])) if ld else []
        rows = (self.verdicts.get("steps") if self.verdicts else None) or []
        by = {r.get("step"): cast("dict[str, Any]", r) for r in rows if isinstance(r, dict)}  # by figure name
        if not by:
            return steps
        out = []
        for s in steps:
            extra = {k: v for k, v in (by.get(s.get("step")) or {}).items() if k in FIGURES and k not in s}
            out.append({**s, **extra} if extra else s)
        return out

    @property
    def verdict(self) -> dict[str, Any]:
        return _get(self.ladder, "saturation", default={}) or {}

    @property
    def offered_kind(self) -> str:
        return self.verdict.get("offered_kind") or _get(self.ladder_steps, 0, "offered_kind", default="") or ""

    def step(self, number: Any) -> dict[str, Any] | None:
        return next((s for s in self.ladder_steps if s.get("step") == number), None)

    def knee(self) -> tuple[dict[str, Any] | None, str]:
        """(the ladder step at the knee, a note). A ladder still rising at its top has no knee:
        its top step stands in for it (the knee is at or beyond it), with a note saying so."""
        if not self.ladder:
            return None, "no ladder"
        sat = self.verdict.get("saturation")
        if isinstance(sat, dict):
            return self.step(sat.get("step")), ""
        if self.still_rising():  # the top step that ran whole: a step cut short stands for nothing
            full = [s for s in self.ladder_steps if not s.get("cut")]
            return (full[-1] if full else None), "top step: no knee, still rising"
        return None, "no knee found"

    def still_rising(self) -> bool:
        return any(str(r).startswith("no knee found") for r in self.verdict.get("reasons") or [])

    # -- the facts shown side by side --

    @property
    def server(self) -> str:
        """The server's kind and version (the settings it exports: `server_config`)."""
        srv = _get(self.doc, "environment", "server", default={}) or {}
        kind = srv.get("kind") or "unknown server"
        ver = srv.get("version")
        if isinstance(ver, dict):
            ver = ver.get("version") or ver.get("build_info") or ver.get("sha") or next(iter(ver.values()), None)
        return f"{kind} {ver}" if ver else str(kind)

    @property
    def server_config(self) -> dict[str, str]:
        """The settings the server exports about itself in an info series read from its /metrics
        (results server_metrics.source.info): the simulator's llm_locust_sim_info, the model name
        left out (a row of its own); {} for a server that exports none."""
        info = _get(self.doc, "server_metrics", "source", "info", default={}) or {}
        rows = info.get(SIM_INFO) if isinstance(info, dict) else None
        if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
            return {}
        return {str(k): str(v) for k, v in rows[0].items() if k != "model_name"}

    @property
    def server_identity(self) -> tuple[Any, ...]:
        """What makes two runs' servers the same server: kind, version and exported settings."""
        srv = _get(self.doc, "environment", "server", default={}) or {}
        ver = srv.get("version")
        version = tuple(sorted((str(k), str(v)) for k, v in ver.items())) if isinstance(ver, dict) else ver
        return (srv.get("kind"), version, tuple(sorted(self.server_config.items())))

    @property
    def model(self) -> str:
        return (
            _get(self.doc, "environment", "server", "model")
            or _get(self.doc, "run", "server", "model")
            or self.settings.get("model")
            or "unknown"
        )

    @property
    def gpu(self) -> str:
        gpus = _get(self.doc, "environment", "gpus", default=[]) or []
        names = [g.get("model_name") or "GPU" for g in gpus if isinstance(g, dict)]
        if not names:
            return "-"
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        return ", ".join(f"{c}x {n}" if c > 1 else n for n, c in counts.items())

    @property
    def trace_sha(self) -> str | None:
        return _get(self.doc, "environment", "trace", "sha256")

    @property
    def trace_path(self) -> str:
        return _get(self.doc, "environment", "trace", "path") or self.settings.get("trace") or ""

    @property
    def trace(self) -> str:
        name = os.path.basename(self.trace_path) or "?"
        return f"{self.trace_sha[:12]} ({name})" if self.trace_sha else f"{name} (no sha256)"

    @property
    def command(self) -> list[str]:
        cmd = _get(self.doc, "run", "command", default=[]) or []
        return [str(c) for c in cmd] if isinstance(cmd, list) else []

    def _plan_ladder(self) -> dict[str, Any] | None:
        ld = _get(self.doc, "plan", "ladder")
        if isinstance(ld, dict):
            return ld
        ld = _get(self.ladder, "ladder")
        return ld if isinstance(ld, dict) else None

    @property
    def load(self) -> str:
        """The load plan: the ladder's kind and levels, or the loop and its users / speed."""
        ld = self._plan_ladder()
        if ld:
            levels = ",".join(_num_plain(v) for v in ld.get("steps") or [])
            arr = f" ({ld.get('arrivals')} arrivals)" if ld.get("kind") == "rate" and ld.get("arrivals") else ""
            return f"ladder {ld.get('kind')}:{levels}{arr}"
        spec = _get(self.settings, "ladder", "spec")
        if spec:
            return f"ladder {spec}"
        cmd = self.command
        think = self.settings.get("think_time") or 0
        extra = f", think time {think:g} s" if think else ""
        recorded = _get(self.doc, "run", "load") or {}  # results version 2 record the load itself
        if "--replay" in cmd or recorded.get("mode") == "replay":
            rp = self.settings.get("replay") or {}
            parts = [f"replay at {rp.get('speed', 1.0):g}x"]
            if rp.get("start_offset"):
                parts.append(f"from {rp['start_offset']:g} s")
            if rp.get("duration"):
                parts.append(f"{rp['duration']:g} s of trace")
            if (rp.get("loops") or 1) != 1:
                parts.append(f"{rp['loops']} loops")
            if rp.get("max_in_flight"):
                parts.append(f"max {rp['max_in_flight']} in flight")
            return ", ".join(parts) + extra
        users = str(recorded["users"]) if recorded.get("users") is not None else _opt(cmd, "-u", "--users")
        if users is None and cmd[:1] and cmd[0].endswith("llm-locust"):
            users = str(DEFAULT_USERS)
        return f"closed loop, {users or '?'} users{extra}"

    @property
    def timing(self) -> str:
        """How long the load was held: step length and warm-up, or the run time."""
        ld = self._plan_ladder()
        if ld:
            out = f"{_num_plain(ld.get('duration'))} s steps, {_num_plain(ld.get('warmup'))} s warm-up"
            if ld.get("requests"):
                out += f", {ld['requests']} requests"
            if ld.get("stable"):
                st = ld["stable"]
                out += f", stable window {_num_plain(st.get('window'))} s"
            return out
        recorded = _get(self.doc, "run", "load") or {}
        if "--replay" in self.command or recorded.get("mode") == "replay":
            return "the trace's own length"
        t = f"{recorded['run_time']}s" if recorded.get("run_time") else _opt(self.command, "-t", "--run-time")
        if t is None and self.command[:1] and self.command[0].endswith("llm-locust"):
            t = DEFAULT_RUN_TIME
        return f"{t}" if t else "?"

    @property
    def output_length(self) -> str:
        s = self.settings
        mt = s.get("max_tokens") or 0
        cap = s.get("max_tokens_cap") or 0
        out = f"max_tokens {mt}" if mt else "the workload's lengths"
        if cap:
            out += f", cap {cap}"
        return out

    @property
    def force_length(self) -> str:
        return "forced" if self.settings.get("force_length", True) else "not forced"

    @property
    def api(self) -> str:
        return str(self.settings.get("api") or "?")

    @property
    def tool(self) -> str:
        return f"llm-locust {_get(self.doc, 'environment', 'llm_locust', default='?')}"

    @property
    def lengths(self) -> dict[str, Any]:
        """Tokens asked for per request and whether forced, to check another tool's run against
        (tools.ForeignRun): the --synthetic spec of the recorded command, max_tokens over it, else
        the mean of what the server counted (usage) per ok request."""
        spec = dict(kv.split("=", 1) for kv in (_opt(self.command, "--synthetic") or "").split(",") if "=" in kv)
        ok = self.summary.get("ok") or 0
        measured = {
            k: (self.summary.get(f) or 0) / ok or None if ok else None
            for k, f in (("in", "tokens_in"), ("out", "tokens_out"))
        }
        mt = self.settings.get("max_tokens") or 0
        return {
            "input tokens": _number(spec.get("input")) or measured["in"],
            "output tokens": mt or _number(spec.get("output")) or measured["out"],
            "forced": bool(self.settings.get("force_length", True)),
        }

    @property
    def slo_text(self) -> str:
        if not self.slos:
            return "-"
        return ", ".join(f"{k} {_fmt_slo(k, v)}" for k, v in self.slos.items())

    def flag_items(self) -> list[tuple[int | None, str]]:
        """The validity marks of the run (step None) and of its (ladder) steps, as texts."""
        out: list[tuple[int | None, str]] = [(None, f"run: {f}") for f in self.doc["validity"]["flags"]]
        interrupted = self.doc["run"].get("interrupted")
        if isinstance(interrupted, dict):  # its figures end where the signal came: not the plan's
            out.insert(0, (None, f"run: interrupted by {interrupted.get('signal', 'a signal')}"))
        if self.doc.get("partial"):  # a checkpoint (docs/results.md): the run was killed or still went on
            out.insert(0, (None, "run: partial (a checkpoint written while the run went on; its end never came)"))
        unit = OFFERED_UNITS.get(self.offered_kind, "")
        for s in self.ladder_steps:
            if s.get("cut"):
                ran, planned = s.get("ran_seconds"), s.get("planned_seconds")
                took = f" after {ran:.1f} s of {planned:g} s" if ran is not None and planned else ""
                out.append(
                    (
                        s.get("step"),
                        f"step {s.get('step')} ({_load(s.get('offered'), unit)}): cut short by the "
                        f"interrupt{took}, {s.get('sent', 0)} request{'' if s.get('sent') == 1 else 's'}; not judged",
                    )
                )
            if s.get("flags"):
                out.append(
                    (s.get("step"), f"step {s.get('step')} ({_load(s.get('offered'), unit)}): {', '.join(s['flags'])}")
                )
        if not self.ladder:
            for row in self.doc["steps"]:
                if isinstance(row["step"], int) and row["step"] > 0 and row["flags"]:
                    out.append((row["step"], f"step {row['step']}: {', '.join(row['flags'])}"))
        return out

    def flags(self) -> list[str]:
        return [t for _, t in self.flag_items()]


def _unique_labels(paths: list[str], labels: list[str]) -> list[str]:
    if len(labels) > len(paths):
        raise CompareError(f"{len(labels)} --label given for {len(paths)} results files")
    stems = list(labels) + [Path(p).stem for p in paths[len(labels) :]]
    out = list(stems)
    for i in range(len(labels), len(paths)):
        if stems.count(stems[i]) > 1:  # two results.json from different folders: say which
            parent = Path(paths[i]).resolve().parent.name
            out[i] = f"{parent}/{stems[i]}" if parent else stems[i]
    seen: dict[str, int] = {}
    for i, lab in enumerate(out):
        if lab in seen:
            if i < len(labels):
                raise CompareError(f"label {lab!r} given twice: labels must tell the runs apart")
            seen[lab] += 1
            out[i] = f"{lab}#{seen[lab]}"
        else:
            seen[lab] = 1
    return out

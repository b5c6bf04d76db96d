"""The report's figures: plain data in, SVG text out (matplotlib, no pyplot, no global state).

Every function returns one `<svg>` element ready to inline in HTML: the XML prolog and the RDF
metadata are dropped, every id is prefixed with the figure's name (so several figures share one
page without clashing ids), and the output is deterministic (fixed hash salt, no date). Artists
the tests look for carry ids (`gid`): a line's points are the `<use>` marks in `<g id=NAME-KEY>`.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType  # for the annotation only (recent matplotlib has it)

RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text as <text>, in the reader's fonts: small, and nothing to fetch
    "svg.hashsalt": "llm-locust",  # deterministic clip-path and marker ids
    "path.simplify": False,  # every data point is drawn: point counts are checkable
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e6ea",
    "grid.linewidth": 0.6,
    "legend.fontsize": 8,
    "legend.frameon": True,
    "legend.framealpha": 0.85,
    "legend.edgecolor": "none",
    "lines.linewidth": 1.6,
    "lines.markersize": 5,
}
METADATA = {"Date": None, "Creator": None}  # no timestamp: the same results give the same bytes
KNEE = "#d9480f"
FLAGGED = "#c92a2a"
SLO = "#868e96"
COLORS = ("#1c7ed6", "#2b8a3e", "#7048e8", "#e67700", "#0b7285", "#c2255c")


class Line(NamedTuple):
    key: str  # the id of its group: NAME-KEY
    label: str
    values: Sequence[float | None]
    dashed: bool = False
    # per point its 95% interval (low, high), drawn as an error bar (`NAME-PANEL-KEY-ci`); None: none
    intervals: Sequence[tuple[float, float] | None] = ()


class Panel(NamedTuple):
    key: str
    title: str
    ylabel: str
    lines: list[Line]
    limits: Sequence[tuple[str, str, float]] = ()  # (key, label, y): horizontal lines (SLOs, capacity)
    log_y: bool = False


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _style() -> Any:
    """The report's style for one plot. matplotlib (and numpy and Pillow with it) is imported at
    the first plot drawn, not with this module: every run process imports the report to write its
    results and draws nothing, and the import cost each one about 0.6 CPU-s at start-up."""
    import matplotlib

    return matplotlib.rc_context(RC)


def _new(width: float, height: float, ncols: int = 1, nrows: int = 1, sharex: bool = False):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas; savefig(format="svg") hands it to the SVG writer
    axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False).ravel().tolist()
    return fig, axes


def to_svg(fig: Figure, name: str) -> str:
    """The figure as an inline <svg>: no prolog, no metadata, ids prefixed with `name`."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=METADATA)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)
    svg = re.sub(r'(<svg[^>]*?) width="[^"]*" height="[^"]*"', r"\1", svg, count=1)  # scales with the page
    svg = re.sub(r'\bid="', f'id="{name}-', svg)
    svg = svg.replace("url(#", f"url(#{name}-").replace('xlink:href="#', f'xlink:href="#{name}-')
    return svg.strip()


def _load_axis(ax, x: Sequence[float], xlabel: str, log_x: bool) -> None:
    if log_x:
        ax.set_xscale("log", base=2)
    ax.set_xticks(list(x), [f"{v:g}" for v in x], rotation=45 if len(x) > 10 else 0)
    from matplotlib.ticker import NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel)


def vs_load(
    name: str,
    x: Sequence[float],
    panels: list[Panel],
    *,
    xlabel: str,
    knee: int | None = None,
    flagged: Sequence[int] = (),
    log_x: bool = False,
    width: float = 11.0,
    height: float = 3.3,
    cut: int | None = None,
) -> str:
    """Panels side by side, each with lines against the offered load (x). knee: index of the
    saturation step, marked by a vertical line in each panel and a point on each panel's first
    line (`NAME-knee-PANEL`); flagged: indices of suspect steps, ringed on the first line; cut:
    index of the step an interruption cut short, drawn apart from its line (`_cut_point`)."""
    with _style():
        fig, axes = _new(width, height, ncols=len(panels))
        for ax, panel in zip(axes, panels, strict=True):
            for i, line in enumerate(panel.lines):
                ys = [_nan(v) for v in line.values]
                if cut is not None and cut < len(ys):
                    _cut_point(ax, x, ys, cut, COLORS[i % len(COLORS)], f"{panel.key}-{line.key}", i == 0)
                    ys[cut] = math.nan  # the line joins the full steps only
                ax.plot(
                    x,
                    ys,
                    marker="o",
                    linestyle="--" if line.dashed else "-",
                    color=COLORS[i % len(COLORS)],
                    label=line.label,
                    gid=f"{panel.key}-{line.key}",
                )
                _error_bars(ax, x, ys, line.intervals, COLORS[i % len(COLORS)], f"{panel.key}-{line.key}-ci")
            for j, (key, label, y) in enumerate(panel.limits):
                ax.axhline(
                    y,
                    color=SLO,
                    linestyle=(0, (4, 3)) if j % 2 == 0 else (0, (1, 2)),
                    linewidth=1.1,
                    label=label,
                    gid=f"{panel.key}-limit-{key}",
                )
            first = [_nan(v) for v in panel.lines[0].values] if panel.lines else []
            marked = [i for i in flagged if i < len(first) and not math.isnan(first[i])]
            if marked:
                ax.plot(
                    [x[i] for i in marked],
                    [first[i] for i in marked],
                    linestyle="none",
                    marker="o",
                    markersize=11,
                    markerfacecolor="none",
                    markeredgecolor=FLAGGED,
                    markeredgewidth=1.4,
                    label="flagged step",
                    gid=f"{panel.key}-flagged",
                )
            if knee is not None:
                ax.axvline(x[knee], color=KNEE, linestyle="--", linewidth=1.2, gid=f"{panel.key}-knee-line")
                if first and not math.isnan(first[knee]):
                    ax.plot(
                        [x[knee]],
                        [first[knee]],
                        linestyle="none",
                        marker="D",
                        markersize=8,
                        color=KNEE,
                        label="saturation (knee)",
                        gid=f"{panel.key}-knee",
                    )
            if panel.log_y:
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            _load_axis(ax, x, xlabel, log_x)
            ax.set_title(panel.title, loc="left")
            ax.set_ylabel(panel.ylabel)
            ax.legend(loc="best")
        return to_svg(fig, name)


def _error_bars(ax, x: Sequence[float], ys: list[float], intervals, color: str, gid: str) -> None:
    """Each point's 95% interval as an error bar (the points with one)."""
    pts = [(x[i], ys[i], iv) for i, iv in enumerate(intervals) if iv is not None and not math.isnan(ys[i])]
    if not pts:
        return
    ax.errorbar(
        [p[0] for p in pts],
        [p[1] for p in pts],
        yerr=[[max(p[1] - p[2][0], 0.0) for p in pts], [max(p[2][1] - p[1], 0.0) for p in pts]],
        fmt="none",
        ecolor=color,
        elinewidth=1.0,
        capsize=3,
        gid=gid,
    )


def _cut_point(ax, x: Sequence[float], ys: list[float], cut: int, color: str, gid: str, label: bool) -> None:
    """A step cut short by an interruption: a hollow point (`GID-cut`), joined
    to the step before it by a dotted line (`GID-cut-link`), never by the line of full steps: its
    figures are of a part of the step (a p99 of a few requests), not the step's."""
    y = ys[cut]
    if math.isnan(y):
        return
    before = [j for j in range(cut - 1, -1, -1) if not math.isnan(ys[j])]
    if before:
        j = before[0]
        ax.plot([x[j], x[cut]], [ys[j], y], linestyle=":", linewidth=1.1, color=color, gid=f"{gid}-cut-link")
    ax.plot(
        [x[cut]],
        [y],
        linestyle="none",
        marker="o",
        markersize=9,
        markerfacecolor="white",
        markeredgecolor=color,
        markeredgewidth=1.4,
        label="cut short (interrupted)" if label else "_nolegend_",
        gid=f"{gid}-cut",
    )


def _ms_label(v: float, _pos: int = 0) -> str:
    return f"{v:g}"


def _ms_text(v: float) -> str:
    return f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"


def histogram(
    name: str,
    bins: Sequence[Sequence[float]],
    *,
    title: str,
    marks: Sequence[tuple[str, float | None]] = (),
    width: float = 5.4,
    height: float = 3.0,
) -> str:
    """Log-binned latency histogram: bins [[low_s, high_s, count], ...] as bars on a log axis in
    ms (`NAME-bin-I`, one per bin), with vertical lines at `marks` (label, seconds; None: not drawn)."""
    with _style():
        fig, (ax,) = _new(width, height)
        lows = [b[0] * 1e3 for b in bins]
        widths = [(b[1] - b[0]) * 1e3 for b in bins]
        bars = ax.bar(
            lows,
            [b[2] for b in bins],
            width=widths,
            align="edge",
            color=COLORS[0],
            alpha=0.85,
            edgecolor="white",
            linewidth=0.4,
        )
        for i, patch in enumerate(bars.patches):
            patch.set_gid(f"bin-{i}")
        for j, (label, v) in enumerate(marks):
            if v is not None and v > 0:
                ax.axvline(
                    v * 1e3,
                    color=("#343a40", FLAGGED, SLO)[j % 3],
                    linestyle="--",
                    linewidth=1.1,
                    label=f"{label} {_ms_text(v * 1e3)} ms",
                    gid=f"mark-{j}",
                )
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(_ms_label))
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("samples")
        ax.set_title(title, loc="left")
        if any(v is not None and v > 0 for _label, v in marks):  # a mark at 0 or missing draws no line
            ax.legend(loc="best")
        return to_svg(fig, name)


class Window(NamedTuple):
    label: str
    start: float  # seconds on the series' axis
    measured_from: float
    end: float
    steady: float | None = None  # the step's steady-state output tokens/s (drawn across its window)


def timeseries(
    name: str,
    t: Sequence[float],
    tokens: Sequence[float],
    ok: Sequence[float],
    failed: Sequence[float],
    windows: Sequence[Window] = (),
    *,
    minutes: bool = False,
    width: float = 11.0,
    height: float = 4.8,
) -> str:
    """Output tokens/s (top) and requests ok / failed per second (bottom) over the run, one point
    per second (`NAME-tokens`, `NAME-ok`, `NAME-failed`); each ladder step's start is a vertical
    line (`NAME-boundary-I`), its warm-up shaded (`NAME-warmup-I`), its steady rate a segment."""
    scale = 60.0 if minutes else 1.0
    xs = [v / scale for v in t]
    with _style():
        fig, (top, bottom) = _new(width, height, nrows=2, sharex=True)
        top.plot(xs, tokens, color=COLORS[0], linewidth=1.0, label="output tokens/s", gid="tokens")
        bottom.plot(xs, ok, color=COLORS[1], linewidth=1.0, label="ok", gid="ok")
        bottom.plot(xs, failed, color=FLAGGED, linewidth=1.0, label="failed or cancelled", gid="failed")
        for i, w in enumerate(windows):
            for ax, part in ((top, "t"), (bottom, "b")):
                ax.axvspan(
                    w.start / scale,
                    w.measured_from / scale,
                    color="#f1f3f5",
                    linewidth=0,
                    gid=f"warmup-{i}{part}" if part == "b" else f"warmup-{i}",
                )
                ax.axvline(
                    w.start / scale,
                    color="#495057",
                    linewidth=0.8,
                    gid=f"boundary-{i}" if part == "t" else f"boundary-{i}b",
                )
            if w.steady is not None:
                top.plot(
                    [w.measured_from / scale, w.end / scale],
                    [w.steady, w.steady],
                    color=KNEE,
                    linewidth=2.0,
                    label="step steady-state tokens/s" if i == 0 else None,
                    gid=f"steady-{i}",
                )
            top.annotate(
                f"step {w.label}",
                (w.start / scale, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -2),
                textcoords="offset points",
                va="top",
                fontsize=8,
                color="#495057",
            )
        if windows:
            top.axvline(windows[-1].end / scale, color="#495057", linewidth=0.8, gid="boundary-end")
        top.set_ylabel("tokens/s")
        top.set_ylim(bottom=0)
        top.set_title("output tokens per second", loc="left")
        bottom.set_ylabel("requests/s")
        bottom.set_ylim(bottom=0)
        bottom.set_title("requests ended per second", loc="left")
        bottom.set_xlabel("minutes since start" if minutes else "seconds since start")
        top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return to_svg(fig, name)


class Front(NamedTuple):
    """One run's steps on the throughput/interactivity plane and its Pareto frontier."""

    key: str  # ids: NAME-KEY-steps (every step), NAME-KEY-frontier, NAME-KEY-knee, NAME-KEY-flagged
    label: str
    points: Sequence[tuple[float, float]]  # (output tok/s per GPU, tok/s per user), one per step
    labels: Sequence[str] = ()  # per point, written beside it ("step 3 (16 users)")
    frontier: Sequence[tuple[float, float]] = ()  # the frontier's points, by x
    knee: int | None = None  # index in points of the saturation step
    flagged: Sequence[int] = ()  # indices of suspect steps, ringed


def pareto(
    name: str,
    fronts: Sequence[Front],
    *,
    title: str = "throughput per GPU against interactivity",
    xlabel: str = "output tokens/s per GPU",
    ylabel: str = "tokens/s per user (1 / TPOT p50)",
    width: float = 7.5,
    height: float = 4.4,
) -> str:
    """Steps as points, each run's Pareto frontier as a line through its frontier points (up and to
    the right is better: more tokens per GPU for more tokens per user). Several runs share the
    axes (compare); the step labels are written for one run only."""
    with _style():
        fig, (ax,) = _new(width, height)
        for i, f in enumerate(fronts):
            color = COLORS[i % len(COLORS)]
            if f.points:
                ax.plot(
                    [p[0] for p in f.points],
                    [p[1] for p in f.points],
                    linestyle="none",
                    marker="o",
                    color=color,
                    alpha=0.55 if len(fronts) > 1 else 0.8,
                    label=f"{f.label}: steps" if len(fronts) > 1 else "steps",
                    gid=f"{f.key}-steps",
                )
            if f.frontier:
                ax.plot(
                    [p[0] for p in f.frontier],
                    [p[1] for p in f.frontier],
                    marker="o",
                    color=color,
                    linewidth=2.0,
                    label=f"{f.label}: Pareto frontier" if len(fronts) > 1 else "Pareto frontier",
                    gid=f"{f.key}-frontier",
                )
            marked = [j for j in f.flagged if j < len(f.points)]
            if marked:
                ax.plot(
                    [f.points[j][0] for j in marked],
                    [f.points[j][1] for j in marked],
                    linestyle="none",
                    marker="o",
                    markersize=11,
                    markerfacecolor="none",
                    markeredgecolor=FLAGGED,
                    markeredgewidth=1.4,
                    label="flagged step" if i == 0 else None,
                    gid=f"{f.key}-flagged",
                )
            if f.knee is not None and f.knee < len(f.points):
                ax.plot(
                    [f.points[f.knee][0]],
                    [f.points[f.knee][1]],
                    linestyle="none",
                    marker="D",
                    markersize=8,
                    color=KNEE,
                    label="saturation (knee)" if i == 0 else None,
                    gid=f"{f.key}-knee",
                )
            if len(fronts) == 1:
                for p, text in zip(f.points, f.labels, strict=False):  # labels are optional (empty)
                    ax.annotate(text, p, xytext=(4, 4), textcoords="offset points", fontsize=7.5, color="#495057")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, loc="left")
        ax.legend(loc="best")
        return to_svg(fig, name)

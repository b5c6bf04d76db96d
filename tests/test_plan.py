"""Test plans: the short ladder syntax, YAML loading and validation (every bad-input message),
command-line overrides and the effective plan."""

import os
from pathlib import Path

import pytest
import yaml

from llm_locust.settings.plan import (
    EarlyStop,
    Ladder,
    Plan,
    PlanError,
    Stable,
    dump_plan,
    load_plan,
    merge_cli,
    parse_ladder,
    parse_seconds,
    plan_from_dict,
)
from llm_locust.workload.synth import SynthSpec

REPO = Path(__file__).resolve().parent.parent
PLANS = REPO / "plans"
TRACE = REPO / "traces" / "azure2023_conv_head200.csv"


def write(tmp_path, text, name="plan.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def problems(tmp_path, text):
    with pytest.raises(PlanError) as e:
        load_plan(write(tmp_path, text))
    return e.value.problems


# ---- the short ladder syntax ----


@pytest.mark.parametrize(
    "text, kind, levels",
    [
        ("concurrency:1..64", "concurrency", (1, 2, 4, 8, 16, 32, 64)),
        ("concurrency:1,4,8,16,32", "concurrency", (1, 4, 8, 16, 32)),
        ("rate:0.5..8", "rate", (0.5, 1, 2, 4, 8)),
        ("rate:1..10:+1", "rate", tuple(range(1, 11))),
        ("rate:1..10:+4", "rate", (1, 5, 9, 10)),  # the ladder ends at its stop
        ("speed:0.5,1,2,4", "speed", (0.5, 1, 2, 4)),
        ("concurrency:1..100", "concurrency", (1, 2, 4, 8, 16, 32, 64, 100)),
        ("concurrency:1..32:x1.5", "concurrency", (1, 2, 3, 5, 8, 11, 17, 26, 32)),  # whole users
        ("concurrency:2..54:*3", "concurrency", (2, 6, 18, 54)),
        ("rate:0.1..0.3:+0.1", "rate", (0.1, 0.2, 0.3)),
        (" Concurrency : 8 ", "concurrency", (8,)),
        ("rate:2.5,3.5", "rate", (2.5, 3.5)),
    ],
)
def test_short_ladder_syntax(text, kind, levels):
    ld = parse_ladder(text)
    assert ld.kind == kind and ld.levels == tuple(float(v) for v in levels)
    assert ld.warmup == 10 and ld.duration == 40 and ld.window == 30 and ld.requests == 0 and ld.stable is None


def test_short_ladder_timing_and_planned_time():
    ld = parse_ladder("concurrency:1..64", warmup=5, duration=20, requests=100, stable=Stable(window=5, max_extend=30))
    assert (ld.warmup, ld.duration, ld.requests) == (5, 20, 100)
    assert ld.planned_time() == (7 * 20, 7 * 20 + 7 * 30)
    assert parse_ladder("concurrency:1..64").planned_time() == (280, 280)
    assert ld.spec() == "concurrency:1,2,4,8,16,32,64"


@pytest.mark.parametrize(
    "text, message",
    [
        ("conc:1..4", "ladder 'conc:1..4': unknown kind 'conc'; one of concurrency, rate, speed (did you mean 'concurrency'?)"),
        ("qps:1..4", "unknown kind 'qps'; one of concurrency, rate, speed"),
        ("concurrency:64..1", "ladder 'concurrency:64..1': start 64 > stop 1"),
        ("concurrency:1..64:x1", "a geometric factor must be > 1, got 1"),
        ("concurrency:1..64:x0.5", "a geometric factor must be > 1, got 0.5"),
        ("rate:1..10:+0", "a linear step must be > 0, got 0"),
        ("rate:1..10:+-1", "a linear step must be > 0, got -1"),
        ("rate:0..10", "ladder 'rate:0..10': start must be > 0, got 0"),
        ("concurrency:", "ladder 'concurrency:': no levels given"),
        ("concurrency:4,2", "steps: levels must increase, got 2 after 4"),
        ("concurrency:4,4", "levels must increase, got 4 after 4"),
        ("concurrency:1.5,2", "concurrency levels are whole users, got 1.5"),
        ("rate:-1,2", "every level must be > 0, got -1"),
        ("rate:a..b", "start: 'a' is not a number"),
        ("speed:1,,2", "empty item in the list"),
        ("speed:1,x", "'x' is not a number"),
        ("rate:1..10:/2", "after A..B write :xF (geometric factor) or :+S (linear step), got '/2'"),
        ("nothing", "expected KIND:LEVELS, e.g. concurrency:1..64"),
        ("", "expected KIND:LEVELS"),
        ("rate:1..1e9:+1", "more than 200 levels"),
    ],
)
def test_bad_short_ladders(text, message):
    with pytest.raises(PlanError) as e:
        parse_ladder(text)
    assert message in str(e.value)


def test_bad_ladder_timing():
    with pytest.raises(PlanError, match=r"warmup: 50 s is not shorter than the step duration \(40 s, warm-up included\): nothing would be measured"):
        parse_ladder("concurrency:1..4", warmup=50)
    with pytest.raises(PlanError, match=r"warmup: 40 s is not shorter"):
        parse_ladder("concurrency:1..4", warmup=40, duration=40)
    with pytest.raises(PlanError, match="warmup: must be >= 0 seconds, got -1"):
        parse_ladder("concurrency:1..4", warmup=-1)
    with pytest.raises(PlanError, match="duration: must be > 0 seconds, got 0"):
        parse_ladder("concurrency:1..4", duration=0, warmup=0)
    with pytest.raises(PlanError, match="requests: must be >= 0"):
        parse_ladder("concurrency:1..4", requests=-5)
    with pytest.raises(PlanError, match="arrivals: must be one of poisson, constant, got 'bursty'"):
        parse_ladder("rate:1..4", arrivals="bursty")
    with pytest.raises(PlanError, match=r"stable.window: 60 s is longer than the measurement window \(duration - warmup = 30 s\)"):
        parse_ladder("rate:1..4", stable=Stable(window=60))
    with pytest.raises(PlanError, match=r"stable.tolerance: must be a fraction between 0 and 1"):
        parse_ladder("rate:1..4", stable=Stable(window=10, tolerance=5))
    with pytest.raises(PlanError, match="stable.max_extend: must be >= 0"):
        parse_ladder("rate:1..4", stable=Stable(window=10, max_extend=-1))


def test_stability_rule():
    st = Stable(window=10, tolerance=0.05, windows=3)
    assert not st.settled([100, 100])  # too few windows yet
    assert st.settled([50, 100, 102, 98])  # the last three agree within 5%
    assert not st.settled([100, 102, 120])
    assert st.settled([0, 0, 0])


def test_parse_seconds():
    assert parse_seconds(5) == 5.0 and parse_seconds("500ms") == 0.5 and parse_seconds("2m") == 120
    assert parse_seconds("1.5h") == 5400 and parse_seconds("30s") == 30 and parse_seconds("7") == 7
    for bad in ("soon", "5 minutes", True, None, float("inf"), "-3s"):
        with pytest.raises(ValueError, match="expected"):
            parse_seconds(bad)


# ---- the sample plans ----


def test_sample_plans_load():
    seed = load_plan(PLANS / "seed-concurrency-ladder.yaml")
    assert seed.ladder.kind == "concurrency" and seed.ladder.levels == (1, 4, 8, 16, 32)
    assert seed.api == "openai-chat" and seed.host == "" and seed.sim.slots == 8
    assert seed.slos == {"ttft": 0.5, "ttft_p50": 0.2, "tpot_p50": 0.05}
    assert seed.workload.synthetic == SynthSpec(requests=1000, input="512", output="128", seed=1)
    assert (seed.ladder.duration, seed.ladder.warmup) == (40, 10)

    qps = load_plan(PLANS / "qps-ladder.yaml")
    assert qps.ladder.kind == "rate" and qps.ladder.levels == (2, 4, 8, 16, 32, 64)
    assert qps.ladder.arrivals == "poisson" and qps.ladder.stable == Stable(window=10, tolerance=0.05, max_extend=60)
    assert qps.slos["error_rate"] == 0.01 and qps.timeouts.request == 300

    replay = load_plan(PLANS / "trace-replay-1x-2x.yaml")
    assert replay.ladder.kind == "speed" and replay.ladder.levels == (1, 2)
    assert replay.workload.trace == str(TRACE) and replay.workload.format == "azure2023"
    assert replay.early_stop.enabled is False


@pytest.mark.parametrize("name", ["seed-concurrency-ladder", "qps-ladder", "trace-replay-1x-2x"])
def test_effective_plan_round_trips(name, tmp_path):
    plan = load_plan(PLANS / f"{name}.yaml")
    assert plan_from_dict(plan.to_dict()) == plan
    # written out as YAML (as a results file keeps it) and read again, from anywhere
    again = load_plan(write(tmp_path, dump_plan(plan), "effective.yaml"))
    assert again == plan and again.source.endswith("effective.yaml")


def test_defaults_of_an_empty_plan(tmp_path):
    plan = load_plan(write(tmp_path, "# nothing\n"))
    assert plan == Plan() and plan.ladder is None
    assert plan.timeouts.request == 600 and plan.early_stop == EarlyStop()


def test_ladder_forms_in_yaml(tmp_path):
    def ladder_of(body):
        return load_plan(write(tmp_path, body)).ladder

    assert ladder_of("ladder: concurrency:1..8\n").levels == (1, 2, 4, 8)
    assert ladder_of("ladder: {kind: rate, start: 1, stop: 4, step: 1}\n").levels == (1, 2, 3, 4)
    assert ladder_of("ladder: {kind: rate, start: 1, stop: 9, factor: 3}\n").levels == (1, 3, 9)
    assert ladder_of("ladder: {kind: concurrency, start: 1, stop: 16}\n").levels == (1, 2, 4, 8, 16)
    ld = ladder_of("ladder: {kind: rate, steps: [1, 2], duration: 1m, warmup: 500ms, requests: 200, arrivals: constant}\n")
    assert (ld.duration, ld.warmup, ld.requests, ld.arrivals) == (60, 0.5, 200, "constant")


def test_options_for_the_run_command(tmp_path):
    plan = load_plan(PLANS / "qps-ladder.yaml")
    o = plan.options()
    assert o["slo"] == "ttft=1,tpot=0.1,error_rate=0.01"
    assert o["synthetic"] == "requests=5000,input=uniform:256:1024,output=lognormal:128:64,rate=0,arrivals=poisson,prefix_tokens=0,seed=7"
    assert o["request_timeout"] == 300 and o["max_tokens_cap"] == 512 and o["no_force_length"] is False
    from llm_locust.workload.synth import parse_spec_text

    assert parse_spec_text(o["synthetic"]) == plan.workload.synthetic
    replay = load_plan(PLANS / "trace-replay-1x-2x.yaml").options()
    assert replay["trace"] == str(TRACE) and replay["synthetic"] == "" and replay["trace_format"] == "azure2023"


# ---- bad plans: every message ----


def test_unknown_keys_are_named_with_their_line(tmp_path):
    p = problems(tmp_path, "host: http://h:1\nladdr: concurrency:1..4\nworkload:\n  trace_file: x.csv\n")
    assert p[0].endswith("plan.yaml:2: laddr: unknown key 'laddr' (did you mean 'ladder'?); known: " + ", ".join(
        ("name", "description", "host", "api", "model", "api_key_env", "workload", "ladder", "max_tokens", "max_tokens_cap",
         "force_length", "continuous_usage", "slos", "timeouts", "early_stop", "seed", "results", "report", "workers", "sim")))
    assert ":4: workload.trace_file: unknown key 'trace_file'" in p[1]
    p = problems(tmp_path, "ladder:\n  kind: concurrency\n  stpes: [1, 2]\n")
    assert any(":3: ladder.stpes: unknown key 'stpes' (did you mean 'steps'?)" in x for x in p)
    p = problems(tmp_path, "ladder: {kind: rate, steps: [1], stable: {window: 5, tolerence: 0.1}}\n")
    assert any("ladder.stable.tolerence: unknown key 'tolerence' (did you mean 'tolerance'?)" in x for x in p)


def test_wrong_types(tmp_path):
    p = problems(
        tmp_path,
        "max_tokens: many\nseed: 1.5\nforce_length: yes please\nworkload: [a]\n"
        "ladder: {kind: concurrency, steps: [1, two], duration: soon}\ntimeouts: {connect: -1}\nslos: [ttft]\n",
    )
    text = "\n".join(p)
    assert ":1: max_tokens: expected a whole number, got a string 'many'" in text
    assert ":2: seed: expected a whole number, got 1.5" in text
    assert ":3: force_length: expected true or false, got a string 'yes please'" in text
    assert ":4: workload: expected a mapping of trace, format, synthetic" in text
    assert ":5: ladder.steps.1: expected a number, got a string 'two'" in text
    assert "ladder.duration: expected seconds (a number, or e.g. 500ms, 30s, 2m), got 'soon'" in text
    assert ":6: timeouts.connect: must be > 0 seconds, got -1.0" in text
    assert ":7: slos: expected a mapping of METRIC: limit, got a list" in text
    p = problems(tmp_path, "- just\n- a list\n")
    assert "expected a mapping of name, description, host" in p[0]


def test_bad_ladders_in_yaml(tmp_path):
    cases = {
        "ladder: {kind: users, steps: [1]}": "ladder.kind: unknown kind 'users'; one of concurrency, rate, speed",
        "ladder: {steps: [1]}": "ladder: missing kind: one of concurrency, rate, speed",
        "ladder: {kind: rate, steps: []}": "ladder.steps: empty list: give at least one level",
        "ladder: {kind: rate, steps: 4}": "ladder.steps: expected a list of levels, got a number",
        "ladder: {kind: rate}": "ladder: no levels: give steps: [..] or start/stop (with factor or step)",
        "ladder: {kind: rate, steps: [1], start: 1, stop: 2}": "give either steps: [..] or start/stop (with factor or step), not both",
        "ladder: {kind: rate, start: 8, stop: 2}": "ladder.start: start 8 > stop 2",
        "ladder: {kind: rate, start: 1, stop: 8, factor: 1}": "ladder.factor: a geometric factor must be > 1, got 1",
        "ladder: {kind: rate, start: 1, stop: 8, step: 0}": "ladder.step: a linear step must be > 0, got 0",
        "ladder: {kind: rate, start: 1, stop: 8, step: 1, factor: 2}": "give factor (geometric) or step (linear), not both",
        "ladder: {kind: rate, start: 1}": "ladder: a range needs both start and stop",
        "ladder: {kind: rate, steps: [4, 2]}": "ladder.steps: levels must increase, got 2 after 4",
        "ladder: {kind: concurrency, steps: [1, 2.5]}": "ladder.steps: concurrency levels are whole users, got 2.5",
        "ladder: {kind: rate, steps: [0, 1]}": "ladder.steps: every level must be > 0, got 0",
        "ladder: {kind: rate, steps: [1], warmup: -5}": "ladder.warmup: must be >= 0 seconds, got -5",
        "ladder: {kind: rate, steps: [1], warmup: 60, duration: 60}": "ladder.warmup: 60 s is not shorter than the step duration (60 s, warm-up included)",
        "ladder: {kind: rate, steps: [1], requests: -1}": "ladder.requests: must be >= 0",
        "ladder: {kind: concurrency, steps: [1], arrivals: poisson}": "ladder.arrivals: applies to rate ladders only",
        "ladder: {kind: rate, steps: [1], arrivals: bursty}": "ladder.arrivals: must be one of poisson, constant, got 'bursty'",
        "ladder: {kind: rate, steps: [1], stable: {tolerance: 0.1}}": "ladder.stable: missing window",
        "ladder: {kind: rate, steps: [1], stable: {window: 40}}": "ladder.stable.window: 40 s is longer than the measurement window",
        "ladder: {kind: rate, steps: [1], stable: 5}": "ladder.stable: expected a mapping of window, tolerance, max_extend, windows",
        "ladder: 'rate:8..2'": "ladder: ladder 'rate:8..2': start 8 > stop 2",
        "ladder: {kind: speed, steps: [1, 2]}\nworkload: {synthetic: 'requests=10'}": "a speed ladder replays arrival times: the synthetic workload needs rate > 0",
    }
    for body, message in cases.items():
        p = problems(tmp_path, body + "\n")
        assert any(message in x for x in p), (body, p)
        assert all(x.startswith(str(tmp_path / "plan.yaml")) for x in p)


def test_bad_slos(tmp_path):
    p = problems(tmp_path, "slos:\n  ttft: 0.5\n  latency_p99: 1\n")
    assert p[0].startswith(f"{tmp_path / 'plan.yaml'}:3: slos.latency_p99: unknown SLO metric 'latency_p99'")
    assert "known: per request (ttft, ttft_queue, tpot, e2e, e2e_queue: the step's p99; itl_max: its largest ITL)" in p[0]
    assert "METRIC_STAT with METRIC one of ttft, ttft_content, ttft_queue, schedule_lag, itl, inter_chunk, tpot, e2e, e2e_queue" in p[0]
    assert "STAT one of p50, p90, p95, p99, p99.9, mean, max" in p[0] and "error_rate" in p[0]
    p = problems(tmp_path, "slos: {ttft_p50: fast, tpot: -1, error_rate: lots}\n")
    text = "\n".join(p)
    assert "slos.ttft_p50: expected seconds" in text
    assert "slos.tpot: a limit must be >= 0" in text
    assert "slos.error_rate" in text
    p = problems(tmp_path, "slos: {ttfd: 1}\n")
    assert "(did you mean 'ttft'?)" in p[0]
    ok = load_plan(write(tmp_path, "slos: 'ttft=500ms, error_rate=2%, itl_p99=0.05'\n"))
    assert ok.slos == {"ttft": 0.5, "error_rate": 0.02, "itl_p99": 0.05}


def test_target_and_workload_problems(tmp_path):
    cases = {
        "api_key: sk-123": "api_key: never put the key in a plan: set an environment variable and name it with api_key_env",
        "host: localhost:8000": "host: expected a URL like http://127.0.0.1:8000, got 'localhost:8000'",
        "api: openai": "api: unknown API 'openai' (did you mean 'openai-completions'?); one of openai-completions, openai-chat",
        "workload: {trace: missing.csv}": f"workload.trace: no such trace file {tmp_path / 'missing.csv'} (relative paths are read from the plan's folder)",
        "workload: {trace: x.csv, format: azure}": "workload.format: unknown trace format 'azure' (did you mean 'azure2023'?)",
        f"workload: {{trace: {TRACE}, synthetic: 'requests=5'}}": "workload: give a trace or a synthetic workload, not both",
        "workload: {synthetic: 'requests=5,colour=red'}": "bad synthetic workload item 'colour=red'",
        "workload: {synthetic: {requests: 0}}": "workload.synthetic.requests: must be >= 1, got 0",
        "workload: {synthetic: {input: 'uniform:5:1'}}": "workload.synthetic.input: bad distribution 'uniform:5:1'",
        "workload: {synthetic: {output: 'empirical:nope.csv'}}": "workload.synthetic.output: no such trace file",
        "workload: {synthetic: {arrivals: bursty}}": "workload.synthetic.arrivals: must be one of poisson, constant",
        "workload: {synthetic: {rate: -1}}": "workload.synthetic.rate: must be >= 0",
        "workload: {synthetic: 42}": "workload.synthetic: expected `key=value,...` text or a mapping",
        "workload: {tokenizer: nope.json}": "workload.tokenizer: no such tokenizer file or folder",
        "max_tokens: 100\nmax_tokens_cap: 50": "max_tokens: max_tokens 100 is above max_tokens_cap 50",
        "early_stop: {max_error_rate: -0.5}": "early_stop.max_error_rate: must be >= 0",
        "sim: {slots: 0}": "sim.slots: must be >= 1, got 0",
        "workers: -2": "workers: must be >= 0, got -2",
        "name: [a, b]": "name: expected text, got a list",
    }
    for body, message in cases.items():
        p = problems(tmp_path, body + "\n")
        assert any(message in x for x in p), (body, p)


def test_every_problem_is_reported_at_once(tmp_path):
    with pytest.raises(PlanError) as e:
        load_plan(write(tmp_path, "api: nope\nladder: {kind: rate, steps: [2, 1]}\nslos: {fast: 1}\nbogus: 1\n"))
    msg = str(e.value)
    assert msg.startswith(f"invalid test plan {tmp_path / 'plan.yaml'}:\n")
    assert len(e.value.problems) == 4
    assert [line.split(":")[1] for line in e.value.problems] == ["1", "2", "3", "4"]


def test_yaml_syntax_errors_and_duplicates(tmp_path):
    p = problems(tmp_path, "ladder:\n  kind: rate\n  steps: [1, 2\n")
    assert len(p) == 1 and ": not valid YAML:" in p[0] and "plan.yaml:4" in p[0]
    p = problems(tmp_path, "seed: 1\nhost: http://a:1\nseed: 2\n")
    assert p == [f"{tmp_path / 'plan.yaml'}:3: seed: duplicate key (first at line 1)"]
    with pytest.raises(PlanError, match="cannot read the plan"):
        load_plan(tmp_path / "absent.yaml")


def test_relative_paths_are_read_from_the_plan_folder(tmp_path):
    sub = tmp_path / "plans"
    sub.mkdir()
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_tokens": 5, "output_tokens": 3}\n')
    plan = load_plan(write(sub, "workload: {trace: ../t.jsonl, synthetic: null}\n"))
    assert plan.workload.trace == str(tmp_path / "t.jsonl")
    plan = load_plan(write(sub, "workload:\n  synthetic: {output: 'empirical:../t.jsonl'}\n"))
    assert plan.workload.synthetic.output == f"empirical:{tmp_path / 't.jsonl'}"


# ---- command-line overrides ----


def test_merge_cli_overrides_the_plan(tmp_path, monkeypatch):
    plan = load_plan(PLANS / "seed-concurrency-ladder.yaml")
    assert merge_cli(plan, {}) is plan
    assert merge_cli(plan, {"host": None, "seed": None}) is plan  # None: not given
    m = merge_cli(plan, {"host": "http://10.0.0.1:8000", "model": "m", "seed": 7, "max_tokens": 64, "request_timeout": 30})
    assert (m.host, m.model, m.seed, m.max_tokens, m.timeouts.request) == ("http://10.0.0.1:8000", "m", 7, 64, 30)
    assert m.ladder == plan.ladder and m.slos == plan.slos and m.workload == plan.workload
    # the ladder: new levels, the plan's timing
    m = merge_cli(plan, {"ladder": "concurrency:1..64"})
    assert m.ladder.levels == (1, 2, 4, 8, 16, 32, 64) and (m.ladder.duration, m.ladder.warmup) == (40, 10)
    m = merge_cli(plan, {"ladder": "rate:1..4:+1", "warmup": 5, "step_duration": 20, "step_requests": 50, "stable": "window=5,max_extend=30"})
    assert m.ladder == Ladder("rate", (1, 2, 3, 4), warmup=5, duration=20, requests=50, stable=Stable(window=5, max_extend=30))
    assert merge_cli(m, {"stable": "off"}).ladder.stable is None
    assert merge_cli(m, {"arrivals": "constant"}).ladder.arrivals == "constant"
    # SLOs merge per metric
    m = merge_cli(plan, {"slo": "ttft=1,e2e=10"})
    assert m.slos == {"ttft": 1.0, "ttft_p50": 0.2, "tpot_p50": 0.05, "e2e": 10.0}
    assert merge_cli(plan, {"slo": {"ttft_p50": 0.3}}).slos["ttft_p50"] == 0.3
    # workload: a trace replaces the synthetic one (relative to the current directory) and back
    monkeypatch.chdir(REPO)
    m = merge_cli(plan, {"trace": "traces/azure2023_conv_head200.csv", "trace_format": "azure2023"})
    assert m.workload.trace == str(TRACE) and m.workload.synthetic is None and m.workload.format == "azure2023"
    m2 = merge_cli(m, {"synthetic": "requests=10,output=32"})
    assert m2.workload.trace == "" and m2.workload.synthetic == SynthSpec(requests=10, output="32")
    # booleans, early stop, simulator
    m = merge_cli(plan, {"no_force_length": True, "early_stop": False, "max_error_rate": 0.2, "sim_slots": 32, "workers": 2})
    assert m.force_length is False and m.early_stop.enabled is False and m.early_stop.max_error_rate == 0.2
    assert m.sim.slots == 32 and m.workers == 2
    # the merged plan is an effective plan like any other
    assert plan_from_dict(m.to_dict()) == m


def test_merge_cli_revalidates_and_names_bad_overrides():
    plan = load_plan(PLANS / "seed-concurrency-ladder.yaml")
    with pytest.raises(PlanError, match=r"after command-line overrides: .*ladder.warmup: 50 s is not shorter than the step duration"):
        merge_cli(plan, {"warmup": 50})
    with pytest.raises(PlanError, match="--ladder: ladder 'users:1..4': unknown kind 'users'"):
        merge_cli(plan, {"ladder": "users:1..4"})
    with pytest.raises(PlanError, match=r"unknown override\(s\) 'colour'; known: host, api"):
        merge_cli(plan, {"colour": "red"})
    with pytest.raises(PlanError, match="unknown SLO metric 'speed'"):
        merge_cli(plan, {"slo": "speed=1"})
    with pytest.raises(PlanError, match="--slo: bad SLO 'ttft'"):
        merge_cli(plan, {"slo": "ttft"})
    with pytest.raises(PlanError, match="no such trace file"):
        merge_cli(plan, {"trace": "/nonexistent/trace.csv"})
    with pytest.raises(PlanError, match="give --trace or --synthetic, not both"):
        merge_cli(plan, {"trace": str(TRACE), "synthetic": "requests=5"})
    with pytest.raises(PlanError, match=r"--warmup, --step-duration needs a ladder: give --ladder \(e.g. concurrency:1..64\)"):
        merge_cli(Plan(), {"warmup": 5, "step_duration": 30})
    with pytest.raises(PlanError, match="--stable: bad item 'window'"):
        merge_cli(plan, {"stable": "window"})
    # a plan without a ladder gets one from the command line, with default timing
    m = merge_cli(Plan(), {"ladder": "concurrency:1..8", "warmup": 2})
    assert m.ladder == Ladder("concurrency", (1, 2, 4, 8), warmup=2)


def test_early_stop_settings_apply_to_steps():
    from test_saturation import fake  # tests/ is on sys.path (rootdir conftest)

    steps = [fake(i + 1, x, y, 0.1 * x) for i, (x, y) in enumerate([(1, 100), (2, 200), (4, 400), (8, 400), (16, 405)])]
    assert EarlyStop().check(steps, {"ttft_p50": 0.5}).startswith("throughput flat for 2 steps")
    assert EarlyStop(enabled=False).check(steps, {}) is None
    assert EarlyStop(flat_steps=0).check(steps, {"ttft_p50": 0.5}) is None  # SLO stop is off by default
    assert EarlyStop(flat_steps=0, on_slo=True).check(steps, {"ttft_p50": 0.5}) == (
        "step 5 (16 users) broke an SLO: ttft p50 1.6 s > 500 ms"
    )


def test_plan_source_is_not_part_of_equality(tmp_path):
    a = load_plan(write(tmp_path, "seed: 3\n", "a.yaml"))
    b = load_plan(write(tmp_path, "seed: 3\n", "b.yaml"))
    assert a == b and a.source != b.source
    assert yaml.safe_load(dump_plan(a))["seed"] == 3
    assert os.path.isabs(load_plan(PLANS / "trace-replay-1x-2x.yaml").workload.trace)


# ---- the plan as options of `llm-locust run` ----


def _settings_of(argv):
    import argparse

    from llm_locust.settings.options import Settings, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return Settings.from_options(parser.parse_args(argv))


def test_plan_argv_gives_the_run_command_the_plan(tmp_path):
    from llm_locust.settings.plan import plan_argv

    plan = load_plan(PLANS / "qps-ladder.yaml")
    argv, host = plan_argv(plan, synth_dir=tmp_path)
    assert host == ""
    s = _settings_of(argv)
    assert parse_ladder(s.ladder) == Ladder("rate", (2, 4, 8, 16, 32, 64))
    assert (s.warmup, s.step_duration, s.step_requests, s.arrivals) == (15, 60, 0, "poisson")
    assert (s.stable_window, s.stable_tolerance, s.stable_max_extend) == (10, 0.05, 60)
    assert s.slos == plan.slos and s.max_tokens_cap == 512 and s.timeouts.total == 300
    assert s.max_error_rate == 0.05 and s.no_early_stop is False and s.results == plan.results
    # the synthetic workload was written as a seeded trace, named by its content, with its recipe
    trace = Path(s.trace)
    assert trace.parent == tmp_path and trace.is_file() and Path(f"{trace}.spec.json").is_file()
    assert len(trace.read_text().splitlines()) == 5000
    assert plan_argv(plan, synth_dir=tmp_path)[0] == argv  # same spec, same file


def test_plan_report_key_becomes_the_report_option(tmp_path):
    from llm_locust.settings.plan import plan_argv, plan_from_dict, plan_from_settings

    (tmp_path / "t.jsonl").write_text('{"input_tokens": 10, "output_tokens": 5}\n')
    plan = load_plan(write(tmp_path, "workload: {trace: t.jsonl}\nresults: r.json\nreport: out/r.html\n"))
    assert plan.report == "out/r.html" and plan.to_dict()["report"] == "out/r.html"
    argv, _host = plan_argv(plan)
    s = _settings_of(argv)
    assert (s.results, s.report) == ("r.json", "out/r.html")
    assert plan_from_dict(plan.to_dict()).report == "out/r.html"
    assert plan_from_settings(s, host="http://127.0.0.1:1").report == "out/r.html"  # the effective plan a results file keeps

    replay = load_plan(PLANS / "trace-replay-1x-2x.yaml")
    argv, _ = plan_argv(replay)
    s = _settings_of(argv + ["--slo", "ttft=5"])  # the command line comes after the plan: it wins
    assert s.trace == str(TRACE) and s.trace_format == "azure2023" and s.ladder == "speed:1,2"
    assert s.no_early_stop is True and s.slos == {"ttft": 5.0}

    seed = load_plan(PLANS / "seed-concurrency-ladder.yaml")
    s = _settings_of(plan_argv(merge_cli(seed, {"host": "http://h:1", "no_force_length": True}), synth_dir=tmp_path)[0])
    assert s.ladder == "concurrency:1,4,8,16,32" and s.max_tokens == 128 and s.force_length is False
    assert plan_argv(merge_cli(seed, {"host": "http://h:1"}), synth_dir=tmp_path)[1] == "http://h:1"

"""Load ladders: the short syntax, step timing, the stability rule and the early stop; a plan file
is data: it opens no door (the web UI's origins), replaces no file and names no record log unless
--trust-plan says so. (Plans and options: test_settings.py.)"""

import json
import subprocess
import time

import pytest
import requests
import yaml
from support import free_port, run_cli, start_run

from llm_locust.settings.ladder_spec import EarlyStop, PlanError, Stable, parse_ladder
from llm_locust.workload.values import parse_seconds

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
        (
            "conc:1..4",
            "ladder 'conc:1..4': unknown kind 'conc'; one of concurrency, rate, speed (did you mean 'concurrency'?)",
        ),
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
    with pytest.raises(
        PlanError,
        match=r"warmup: 50 s is not shorter than the step duration \(40 s, warm-up included\): "
        r"nothing would be measured",
    ):
        parse_ladder("concurrency:1..4", warmup=50)
    with pytest.raises(PlanError, match=r"warmup: 40 s is not shorter"):
        parse_ladder("concurrency:1..4", warmup=40, duration=40)
    with pytest.raises(PlanError, match="warmup: must be >= 0 seconds, got -1"):
        parse_ladder("concurrency:1..4", warmup=-1)
    with pytest.raises(PlanError, match="duration: must be > 0 seconds, got 0"):
        parse_ladder("concurrency:1..4", duration=0, warmup=0)
    with pytest.raises(PlanError, match="requests: must be >= 0"):
        parse_ladder("concurrency:1..4", requests=-5)
    with pytest.raises(PlanError, match="arrivals: must be one of poisson, constant, gamma, got 'bursty'"):
        parse_ladder("rate:1..4", arrivals="bursty")
    with pytest.raises(
        PlanError, match=r"stable.window: 60 s is longer than the measurement window \(duration - warmup = 30 s\)"
    ):
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


def test_early_stop_settings_apply_to_steps():
    from test_saturation import fake  # tests/ is on sys.path (rootdir conftest)

    steps = [fake(i + 1, x, y, 0.1 * x) for i, (x, y) in enumerate([(1, 100), (2, 200), (4, 400), (8, 400), (16, 405)])]
    assert EarlyStop().check(steps, {"ttft_p50": 0.5}).startswith("throughput flat for 2 steps")
    assert EarlyStop(enabled=False).check(steps, {}) is None
    assert EarlyStop(flat_steps=0).check(steps, {"ttft_p50": 0.5}) is None  # SLO stop is off by default
    assert EarlyStop(flat_steps=0, on_slo=True).check(steps, {"ttft_p50": 0.5}) == (
        "step 5 (16 users) broke an SLO: ttft p50 1.6 s > 500 ms"
    )


def test_a_bursts_lengths_follow_the_duration_rule_and_levels_are_bounded():
    """for=/before=/after= are durations like any other: a bare number from 3600 up is refused
    with the "write the unit" message; a level past the sensible limits is refused."""
    assert parse_ladder("burst:rate=4,x=3,for=10,after=1h").burst.after == 3600
    with pytest.raises(PlanError, match=r"for: 10000 would be 10000 seconds: write the unit \(10000ms or 10000s\)"):
        parse_ladder("burst:rate=4,x=3,for=10000")
    with pytest.raises(PlanError, match="levels: 100001 is more than 100000, the most users in one run"):
        parse_ladder("concurrency:1,100001")
    with pytest.raises(PlanError, match="levels: 200000 is more than 100000, the most requests/s"):
        parse_ladder("rate:1..200000:x10")
    assert max(parse_ladder("concurrency:1,100000").levels) == 100000


# ---- a plan is data: it grants no authority (issue 35, finding 6) ----

EVIL = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}


def _plan(tmp_path, name: str, doc: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _until(what: str, fn, timeout: float = 60.0):
    """fn()'s first true value, polled until `timeout` (a web UI takes seconds to come up)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            if last := fn():
                return last
        except requests.RequestException as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def _web_posts(tmp_path, plan: str, sim_url: str, *options: str) -> tuple[dict[str, int], str]:
    """`llm-locust run PLAN --web`: the status of POST /swarm and POST /stop sent as a page of
    evil.example would send them, and what the run printed."""
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    log_path = tmp_path / f"web-{web}.log"
    with open(log_path, "w") as log:
        proc = start_run(
            plan, "--web", "--web-port", str(web), "--host", sim_url, "-u", "1", *options,
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _until("the web UI", lambda: requests.get(base + "/llm/data", timeout=5).json()["state"] == "ready")
        start = {"user_count": "1", "spawn_rate": "1"}
        got = {path: requests.post(base + path, data=data, headers=EVIL, timeout=10).status_code
               for path, data in (("/swarm", start), ("/stop", {}))}  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return got, log_path.read_text()


def test_a_plans_web_origins_do_not_open_the_web_ui(tmp_path, sims):
    """Old code: a plan's `web.origins: http://evil.example` let that site's pages start and stop
    runs (POST /swarm and /stop: 200) without --trust-plan. Now refused (403) and the run says it
    dropped the value; with --trust-plan the plan's origin is trusted, as a user's flag is."""
    plan = _plan(tmp_path, "plan.yaml", {"web": {"origins": "http://evil.example"}, "max_tokens": 8})
    sim = sims(slots=2)
    got, out = _web_posts(tmp_path, plan, sim.url)
    assert got == {"/swarm": 403, "/stop": 403}, (got, out[-3000:])
    assert (
        "  web.origins: http://evil.example (lets that site's pages start and stop runs): "
        "give --web-origins http://evil.example to use it"
    ) in out, out[-3000:]
    trusted, out = _web_posts(tmp_path, plan, sim.url, "--trust-plan")
    assert trusted["/stop"] == 200, (trusted, out[-3000:])


def test_a_plan_replaces_no_file_and_names_no_record_log(tmp_path, sims):
    """Old code: a plan's `results:` replaced an unrelated file and its `record_log:` appended to
    another, without a word. Now an output path the plan names over an existing file stops the
    run before anything starts (exit 2, one line each, the files untouched), its record log is
    dropped (said), and --trust-plan restores the plan's choices."""
    victims = {name: tmp_path / name for name in ("notes.json", "page.html", "journal.txt")}
    for name, path in victims.items():
        path.write_text(f"the user's {name}\n")
    taken = _plan(tmp_path, "taken.yaml", {"results": str(victims["notes.json"]), "report": str(victims["page.html"])})
    p = run_cli(taken, "--host", sims(slots=2).url, "-t", "1s", timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    for key, flag, name in (("results", "--results", "notes.json"), ("report", "--report", "page.html")):
        assert (
            f"{taken}:{1 if key == 'report' else 2}: {key}: {victims[name]}: a file is there already, and a plan "
            f"is data: it may not replace a file: give {flag} {victims[name]} to replace it"
        ) in p.stderr, p.stderr
    assert "started the simulated server" not in p.stdout and "llm-locust summary" not in p.stdout

    results = tmp_path / "r.json"
    logs = _plan(tmp_path, "logs.yaml", {"results": str(results), "record_log": str(victims["journal.txt"])})
    p = run_cli(logs, "--host", sims(slots=2).url, "-u", "1", "-t", "2s", "--max-tokens", "8", timeout=90)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"  record_log: {victims['journal.txt']} (names where every request's record is written)" in p.stderr
    assert json.loads(results.read_text())["summary"]["sent"] > 0
    assert all(path.read_text() == f"the user's {name}\n" for name, path in victims.items())

    p = run_cli(taken, "--trust-plan", "--host", sims(slots=2).url, "-u", "1", "-t", "2s", timeout=90)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(victims["notes.json"].read_text())["schema"] == "llm-locust/results"


def test_a_plan_does_not_open_the_exporter_to_the_network(tmp_path, sims):
    """A plan's `observe.prometheus_host: 0.0.0.0` would serve the run's figures to every machine
    that reaches this one: dropped without --trust-plan (said), the exporter on 127.0.0.1."""
    import psutil

    port = free_port()
    plan = _plan(tmp_path, "plan.yaml", {"observe": {"prometheus_port": port, "prometheus_host": "0.0.0.0"}})
    with open(tmp_path / "run.log", "w") as log:
        proc = start_run(
            plan, "--host", sims(slots=2).url, "-u", "1", "-t", "4s", "--max-tokens", "8",
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def bound() -> str | None:
        for c in psutil.Process(proc.pid).net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port:
                return c.laddr.ip
        return None

    try:
        address = _until("the exporter", bound)
    finally:
        assert proc.wait(timeout=90) == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert address == "127.0.0.1"
    assert "  observe.prometheus_host: 0.0.0.0 (listens on that address" in (tmp_path / "run.log").read_text()

"""Saturation analysis: synthetic curves, noisy curves, the simulator's closed-form model and a
closed-loop ladder driven through the simulator's engine on a virtual clock; early stop."""

import json
import random

import pytest

from llm_locust.analysis.saturation import analyse, early_stop, format_steps
from llm_locust.analysis.steps import StepResult, step_result
from llm_locust.metrics.aggregate import Aggregate
from llm_locust.metrics.records import RequestRecord
from llm_locust.sim.engine import Engine, Seq, SimConfig, capacity, simulate

GEOMETRIC = [1, 2, 4, 8, 16, 32, 64, 128]
W = 1_700_000_000.0


def fake(i, x, y, ttft=None, e2e=None, kind="concurrency", ok=100, failed=0, flags=(), errors=None, sent=None):
    """A StepResult with the given throughput (tokens/s) and latency medians (p99 = 2 x p50)."""
    lat = {}
    if ttft is not None:
        lat["ttft"] = {"count": ok, "p50": ttft, "p90": ttft * 1.5, "p99": ttft * 2, "max": ttft * 3}
    if e2e is not None:
        lat["e2e"] = {"count": ok, "p50": e2e, "p90": e2e * 1.5, "p99": e2e * 2, "max": e2e * 3}
    return StepResult(
        step=i,
        offered=float(x),
        offered_kind=kind,
        window_start=W,
        window_end=W + 30,
        warmup=10,
        steady_seconds=(W, W + 30),
        sent=ok + failed if sent is None else sent,
        ok=ok,
        failed=failed,
        cancelled=0,
        error_rate=failed / (ok + failed) if ok + failed else 0.0,
        requests_per_s=y / 100,
        output_tokens_per_s=float(y),
        aggregate_output_tokens_per_s=float(y),
        aggregate_requests_per_s=y / 100,
        latency=lat,
        goodput_requests_per_s=None,
        goodput_tokens_per_s=None,
        slo_attainment=None,
        concurrency=float(x),
        client_valid="client_saturated" not in flags,
        length_checked=0,
        length_mismatch=0,
        tokens_out=int(y * 30),
        flags=list(flags),
        errors=errors or {},
    )


def ladder(xs, ys, ttfts=None, kind="concurrency"):
    ttfts = ttfts or [None] * len(xs)
    return [fake(i + 1, x, y, t, kind=kind) for i, (x, y, t) in enumerate(zip(xs, ys, ttfts, strict=True))]


def within_one_step(found, truth, levels):
    return found is not None and abs(levels.index(found) - levels.index(truth)) <= 1


def step_results(aggs, levels, kind, *, step_s, warmup, series):
    """Each level's StepResult from its Aggregate: step i's window is its `step_s` seconds after
    `warmup`, from W."""
    return [
        step_result(
            aggs[i],
            step=i + 1,
            offered=x,
            offered_kind=kind,
            window=(W + i * step_s + warmup, W + (i + 1) * step_s),
            warmup=warmup,
            slos={},
            series=series,
        )
        for i, x in enumerate(levels)
    ]


# ---- synthetic curves ----


def test_clear_knee():
    v = analyse(ladder(GEOMETRIC[:7], [100, 200, 400, 800, 810, 805, 812]), {})
    assert v.saturation["offered"] == 8 and v.knee_by == "throughput"
    assert v.saturation["output_tokens_per_s"] == 800 and v.saturation["step"] == 4
    assert v.candidates["kneedle"] == 8
    assert "kneedle" in v.method


def test_linear_growth_has_no_knee():
    v = analyse(ladder(GEOMETRIC, [100 * x for x in GEOMETRIC]), {})
    assert v.saturation is None and v.knee_by is None
    assert any("no knee found (still rising)" in r for r in v.reasons)
    v = analyse(ladder(list(range(1, 11)), [50 * x for x in range(1, 11)], kind="rate"), {})
    assert v.saturation is None and "no knee found (still rising)" in v.reason


def test_concave_but_still_rising_is_no_knee():
    # sqrt growth: each doubling still brings 41% more throughput
    v = analyse(ladder(GEOMETRIC, [100 * x**0.5 for x in GEOMETRIC]), {})
    assert v.saturation is None and "still rising" in v.reason


def test_noisy_plateau():
    rng = random.Random(5)
    for _ in range(50):
        ys = [min(x, 8) * 100 * (1 + rng.uniform(-0.04, 0.04)) for x in GEOMETRIC]
        v = analyse(ladder(GEOMETRIC, ys), {})
        assert within_one_step(v.saturation["offered"], 8, GEOMETRIC), ys


def test_noisy_linear_rate_ladder_knee_within_one_step():
    rates = list(range(1, 11))
    rng = random.Random(6)
    for _ in range(50):
        ys = [100 * min(r, 6.5) * (1 + rng.uniform(-0.03, 0.03)) for r in rates]
        v = analyse(ladder(rates, ys, kind="rate"), {})
        assert v.saturation is not None and 6 <= v.saturation["offered"] <= 8, ys


def test_throughput_collapse_after_the_knee():
    v = analyse(ladder(GEOMETRIC[:7], [100, 200, 400, 800, 600, 300, 100]), {})
    assert v.saturation["offered"] == 8


def test_latency_blow_up_without_throughput_plateau():
    ys = [100 * x for x in GEOMETRIC]  # throughput keeps growing ...
    ttft = [0.05, 0.05, 0.06, 0.07, 0.8, 3.0, 9.0, 20.0]  # ... but from 16 users requests queue
    v = analyse(ladder(GEOMETRIC, ys, ttft), {})
    assert v.saturation["offered"] == 8 and v.knee_by == "latency"
    assert v.candidates["throughput"] is None and v.candidates["latency"] == 8.0
    assert any("queueing" in r for r in v.reasons)


def test_batching_latency_growth_is_not_queueing():
    # latency grows 4x over the ladder, but slower than the load: batching, not a queue
    ys = [100 * x for x in GEOMETRIC]
    ttft = [0.010 * (1 + x / 32) for x in GEOMETRIC]
    v = analyse(ladder(GEOMETRIC, ys, ttft), {})
    assert v.saturation is None and v.candidates["latency"] is None


def test_latency_falls_back_to_e2e_without_ttft():
    steps = [fake(i + 1, x, 100 * x, e2e=1.0 if x <= 8 else x / 8 * 5) for i, x in enumerate(GEOMETRIC)]
    v = analyse(steps, {})
    assert v.saturation["offered"] == 8 and "e2e p50" in v.method


def test_one_or_two_steps_and_no_steps():
    for n in (1, 2):
        v = analyse(ladder(GEOMETRIC[:n], [100, 200][:n]), {"ttft": 1.0})
        assert v.saturation is None and f"too few steps for a knee: {n}" in v.reason
    v = analyse(ladder([1, 2], [100, 200], [0.1, 0.1]), {"ttft": 1.0})
    assert v.max_slo_load == 2 and v.max_slo_step == 2
    v = analyse([], {})
    assert v.saturation is None and v.max_slo_load is None and v.reasons
    assert json.dumps(v.to_dict())


def test_flat_and_empty_curves():
    v = analyse(ladder(GEOMETRIC[:5], [500, 510, 505, 498, 507]), {})
    assert v.saturation["offered"] == 1 and v.knee_by == "flat" and "flat" in v.reason
    v = analyse(ladder(GEOMETRIC[:4], [0, 0, 0, 0]), {})
    assert v.saturation is None and "no output tokens" in v.reason


def test_sensitivity_is_passed_to_kneedle():
    ys = [100, 190, 350, 600, 800, 900, 950, 960]
    low = analyse(ladder(GEOMETRIC, ys), {}, sensitivity=1.0)
    assert low.saturation is not None and "S=1" in low.method
    assert "S=3" in analyse(ladder(GEOMETRIC, ys), {}, sensitivity=3.0).method


def test_saturation_step_flags_are_reported():
    steps = ladder(GEOMETRIC[:6], [100, 200, 400, 800, 800, 800])
    steps[3].flags.append("client_saturated")
    v = analyse(steps, {})
    assert v.saturation["flags"] == ["client_saturated"]
    assert any("client saturated in step(s) 4" in r for r in v.reasons)


# ---- the SLO-limited load ----


def test_max_slo_load():
    ttft = [0.1, 0.12, 0.15, 0.2, 0.9, 3.0]
    steps = ladder(GEOMETRIC[:6], [100, 200, 400, 800, 800, 800], ttft)
    v = analyse(steps, {"ttft_p50": 0.25})
    assert v.max_slo_load == 8 and v.max_slo_step == 4
    assert any("16 users broke: ttft p50 900 ms > 250 ms" in r for r in v.reasons)
    # bare ttft is judged on p99 (2 x p50 here)
    assert analyse(steps, {"ttft": 0.25}).max_slo_load == 2
    # nothing met
    v = analyse(steps, {"ttft_p50": 0.05})
    assert v.max_slo_load is None and "no step met every SLO" in v.reason
    # everything met
    v = analyse(steps, {"ttft_max": 10})
    assert v.max_slo_load == 32 and "the top of the ladder still met every SLO" in v.reason
    # a failed step meets nothing, however fast its few answers were
    steps[1] = fake(2, 2, 0, 0.01, ok=0, failed=50)
    v = analyse(steps, {"ttft_p50": 0.25})
    assert v.max_slo_load == 8 and "step 2 (2 users) broke an SLO (no successful request)" in v.reason
    # error rate as an SLO
    steps = [fake(i + 1, x, 100 * x, 0.1, ok=100 - x, failed=x) for i, x in enumerate([1, 2, 4, 8])]
    assert analyse(steps, {"error_rate": 0.03}).max_slo_load == 2
    with pytest.raises(ValueError, match="unknown SLO metric"):
        analyse(steps, {"ttft_p42": 1})


def test_no_slos():
    v = analyse(ladder(GEOMETRIC[:4], [1, 2, 3, 3]), {})
    assert v.max_slo_load is None and "no SLO given" in v.reason


# ---- the simulator's closed-form model ----


def model_curve(slots, levels, o=128, p=100):
    """(tokens/s, TTFT p50) of a closed loop of u users without think time on the simulator
    (docs/sim.md): u o / ((o + 1)(A + B u + C p u / o)) up to the saturation concurrency, the
    saturated figure above it, where the extra users queue (TTFT ~ (u/N - 1) o T)."""
    cfg = SimConfig(slots=slots)
    a, b, c = cfg.iter_base, cfg.iter_per_seq, cfg.iter_per_prefill_token
    cap = capacity(cfg, prompt_tokens=p, output_tokens=o)
    n, t_sat = cap["saturation_concurrency"], cap["mean_iter_s_saturated"]
    out = []
    for u in levels:
        if u <= n:
            it = a + b * u + c * p * u / o
            out.append((u * o / ((o + 1) * it), 1.5 * it + c * p))
        else:
            out.append((cap["output_tokens_per_s"], (u / n - 1) * o * t_sat + 1.5 * t_sat))
    return cap, out


@pytest.mark.parametrize("slots", [8, 32])
def test_model_curve_knee_is_the_slot_count(slots):
    cap, pts = model_curve(slots, GEOMETRIC)
    v = analyse(ladder(GEOMETRIC, [y for y, _ in pts], [t for _, t in pts]), {})
    assert cap["saturation_concurrency"] == slots
    assert v.saturation["offered"] == slots  # exact on the noiseless curve
    assert v.saturation["output_tokens_per_s"] == pytest.approx(cap["output_tokens_per_s"] * 128 / 129, rel=1e-9)
    # throughput alone finds it too
    v = analyse(ladder(GEOMETRIC, [y for y, _ in pts]), {})
    assert v.saturation["offered"] == slots and v.knee_by == "throughput"


@pytest.mark.parametrize("slots", [8, 32])
def test_noisy_model_curve_knee_within_one_step(slots):
    _, pts = model_curve(slots, GEOMETRIC)
    rng = random.Random(slots)
    for _ in range(100):
        noisy = [(y * (1 + rng.gauss(0, 0.03)), t * (1 + rng.gauss(0, 0.03))) for y, t in pts]
        v = analyse(ladder(GEOMETRIC, [y for y, _ in noisy], [t for _, t in noisy]), {})
        assert within_one_step(v.saturation and v.saturation["offered"], slots, GEOMETRIC), noisy


# ---- a closed-loop ladder through the simulator's engine, on a virtual clock ----


def closed_loop_ladder(slots, levels, *, o=64, p=100, step_s=20.0, warmup=5.0):
    """Drive the simulator's engine with a closed loop of `levels` users per step, exactly as the
    server schedules it (a new request misses the iteration running when it arrives), recording
    every request as the client would; then compute each step's StepResult."""
    eng = Engine(SimConfig(slots=slots))
    end_all = step_s * len(levels)
    aggs = [Aggregate() for _ in levels]
    run = Aggregate()
    pending: list[Seq] = []
    now, users, step = 0.0, 0, 0
    counter = [0]

    def new_request(t):
        counter[0] += 1
        r = RequestRecord(
            request_id=str(counter[0]),
            api="openai-chat",
            t_sched=t,
            t_sent=t,
            wall_sent=W + t,
            n_in=p,
            n_in_source="usage",
        )
        pending.append(Seq(n_in=p, target=o, reserve=p + o, owner=r))

    while True:
        while step < len(levels) and now >= step * step_s:
            for _ in range(int(levels[step]) - users):
                new_request(now)
            users = int(levels[step])
            step += 1
        dur = eng.begin()
        for s in pending:  # they arrived during this iteration: admitted by the next one
            eng.submit(s)
        pending.clear()
        if dur is None:
            if not eng.has_work():
                break
            continue
        now += dur
        for s in eng.end():
            r = s.owner
            r.chunk_times.append(now)
            r.chunk_tokens.append(1)
            if r.t_first is None:
                r.t_first = r.t_first_content = now
            if s.state == "done":
                r.t_end, r.n_out, r.n_out_source = now, s.n_out, "usage"
                run.add(r)
                i = int(r.t_sent // step_s)
                if i < len(levels) and r.t_sent >= i * step_s + warmup:
                    aggs[i].add_sent()
                    aggs[i].add(r)
                if now < end_all:
                    new_request(now)
    return step_results(aggs, levels, "concurrency", step_s=step_s, warmup=warmup, series=run.series)


@pytest.mark.parametrize("slots", [8, 32])
def test_simulated_closed_loop_ladder_finds_the_slot_count(slots):
    o, p = 64, 100
    steps = closed_loop_ladder(slots, GEOMETRIC, o=o, p=p)
    cap = capacity(SimConfig(slots=slots), prompt_tokens=p, output_tokens=o)
    v = analyse(steps, {})
    print(
        f"\n{slots} slots: model saturation {cap['saturation_concurrency']} users, "
        f"{cap['output_tokens_per_s']:.0f} tok/s\n{format_steps(steps, v)}"
    )
    found = v.saturation["offered"]
    assert within_one_step(found, cap["saturation_concurrency"], GEOMETRIC)
    assert found == slots  # on the noiseless simulator the knee is exact
    # past the knee the steady-state throughput is the model's saturated figure
    top = steps[-1].output_tokens_per_s
    assert top == pytest.approx(cap["output_tokens_per_s"], rel=0.02)
    # below it, the closed-loop formula (one lost iteration per request)
    a, b, c = 0.005, 0.0005, 0.00002
    u = 4
    assert steps[2].output_tokens_per_s == pytest.approx(u * o / ((o + 1) * (a + b * u + c * p * u / o)), rel=0.03)
    # Little's law sees the users
    assert steps[3].concurrency == pytest.approx(8, rel=0.1)


def test_simulated_open_loop_rate_ladder_knee_near_capacity():
    """Poisson arrivals per step through simulate(): the knee lies within one step of the
    model's saturated request rate."""
    cfg = SimConfig(slots=8)
    o, p, step_s, warmup = 64, 100, 30.0, 10.0
    cap = capacity(cfg, prompt_tokens=p, output_tokens=o)  # ~13.5 requests/s
    rates = [2, 4, 8, 16, 32]
    rng = random.Random(3)
    arrivals = []
    for i, r in enumerate(rates):
        t = i * step_s
        while True:
            t += rng.expovariate(r)
            if t >= (i + 1) * step_s:
                break
            arrivals.append((t, p, o))
    times = simulate(cfg, arrivals)
    run, aggs = Aggregate(), [Aggregate() for _ in rates]
    for (t, _, n), toks in zip(arrivals, times, strict=True):
        rec = RequestRecord(
            request_id="r",
            api="openai-chat",
            t_sched=t,
            t_sent=t,
            wall_sent=W + t,
            t_first=toks[0],
            t_first_content=toks[0],
            t_end=toks[-1],
            chunk_times=list(toks),
            chunk_tokens=[1] * n,
            n_out=n,
            n_out_source="usage",
        )
        run.add(rec)
        i = int(t // step_s)
        if t >= i * step_s + warmup:
            aggs[i].add(rec)
    steps = step_results(aggs, rates, "rate", step_s=step_s, warmup=warmup, series=run.series)
    v = analyse(steps, {})
    print(f"\nmodel capacity {cap['requests_per_s']:.1f} req/s\n{format_steps(steps, v)}")
    assert v.saturation["offered"] in (8, 16)  # the two levels around 13.5 req/s
    assert steps[-1].requests_per_s == pytest.approx(cap["requests_per_s"], rel=0.05)


# ---- early stop ----


def test_early_stop_rules():
    ys = [100, 200, 400, 800, 810, 805]
    steps = ladder(GEOMETRIC[:6], ys, [0.1] * 6)
    assert early_stop(steps[:4], {}, max_error_rate=0.05) is None
    assert early_stop(steps[:5], {}, max_error_rate=0.05) is None  # flat for one step only
    reason = early_stop(steps, {}, max_error_rate=0.05)
    assert reason.startswith("throughput flat for 2 steps: 800, 810, 805 tok/s")
    assert early_stop(steps, {}, max_error_rate=0.05, flat_steps=0) is None
    assert early_stop(steps, {}, max_error_rate=0.05, flat_steps=3) is None
    # SLO broken
    assert (
        early_stop(steps[:2], {"ttft_p50": 0.05}, max_error_rate=0.05)
        == "step 2 (2 users) broke an SLO: ttft p50 100 ms > 50 ms"
    )
    # errors
    bad = steps[:2] + [fake(3, 4, 300, 0.1, ok=90, failed=10)]
    assert early_stop(bad, {}, max_error_rate=0.05) == "step 3 (4 users): error rate 10.0% above 5.0%"
    assert early_stop(bad, {}, max_error_rate=None) is None
    # server down: nothing succeeded
    down = [fake(1, 1, 0, ok=0, failed=3, errors={"connect_error": {"connection refused": 3}})]
    assert early_stop(down, {}, max_error_rate=0.05) == (
        "step 1 (1 users): no request succeeded (3 failed; connect_error: connection refused)"
    )
    assert early_stop([fake(1, 1, 0, ok=0, sent=0)], {}) == (
        "step 1 (1 users): no request finished (none sent in the step; any in flight were sent before it)"
    )
    assert early_stop([], {}) is None


def test_verdict_format_and_dict():
    cap, pts = model_curve(8, GEOMETRIC)
    steps = ladder(GEOMETRIC, [y for y, _ in pts], [t for _, t in pts])
    v = analyse(steps, {"ttft_p50": 0.1})
    text = v.format()
    assert text.startswith("saturation: 8 users (step 4, by throughput+latency)")
    assert "highest load meeting every SLO: 8 users (step 4)" in text
    d = json.loads(json.dumps(v.to_dict()))
    assert d["saturation"]["offered"] == 8 and d["max_slo_load"] == 8 and d["method"] == v.method
    table = format_steps(steps, v)
    assert table.splitlines()[-len(text.splitlines()) :] == text.splitlines()


def test_a_lone_rise_at_the_top_is_reported_not_followed():
    v = analyse(ladder(GEOMETRIC[:6], [100, 150, 400, 420, 430, 800]), {})
    assert v.saturation["offered"] == 4
    assert "the top step (32 users) gained 100% over the knee after flat steps" in v.reason


def test_odd_ladders_do_not_crash():
    assert analyse(ladder([1, 2, 2, 4, 8], [100, 200, 190, 400, 410]), {}).saturation["offered"] == 4
    assert analyse(ladder([0, 1, 2, 4, 8], [0, 100, 200, 400, 410], kind="rate"), {}).saturation["offered"] == 4
    v = analyse([fake(i + 1, x, 0, ok=0, failed=5) for i, x in enumerate([1, 2, 4])], {"ttft": 1})
    assert v.saturation is None and v.max_slo_load is None


def test_llama_server_like_curves_latency_knee_follows_the_slots():
    """Figures of a concurrency ladder on llama-server (tiny model, 2 busy cores): throughput is
    CPU-bound and flat from about 4 streams whatever -np is; TTFT grows with CPU contention (x1.9
    from 4 to 8 users at -np 8, not a queue) and jumps by x27-30 once requests queue for a slot."""
    levels = [1, 2, 4, 8, 16]
    np4 = analyse(ladder(levels, [1465, 2130, 2349, 2221, 2099], [0.00186, 0.00236, 0.00314, 0.0847, 0.277]), {})
    np8 = analyse(ladder(levels, [1419, 1969, 2236, 2308, 2021], [0.00185, 0.0024, 0.00319, 0.00604, 0.193]), {})
    assert np4.candidates["latency"] == 4 and np8.candidates["latency"] == 8
    assert np4.saturation["offered"] <= 4 and np8.saturation["offered"] <= 8

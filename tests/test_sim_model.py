"""The batching model on a fake clock: exact timing, queueing, closed-form capacity."""
import pytest

from llm_locust.sim.model import Engine, Seq, SimConfig, capacity, decode_rate, simulate

A, B, C = 0.005, 0.001, 0.0001
CFG = SimConfig(slots=8, kv_tokens=10_000, iter_base=A, iter_per_seq=B, iter_per_prefill_token=C)


def test_single_request_timing_is_a_plus_b_plus_prefill():
    [times] = simulate(CFG, [(1.0, 100, 5)])
    ttft = A + B + C * 100
    expected = [1.0 + ttft + k * (A + B) for k in range(5)]
    assert times == pytest.approx(expected, abs=1e-12)


def test_iteration_time_counts_running_sequences_and_prefill_of_admitted_ones():
    # two requests together: iteration 1 prefills both (2 running, 30 prompt tokens)
    t = simulate(CFG, [(0.0, 10, 3), (0.0, 20, 3)])
    first = A + 2 * B + C * 30
    assert t[0] == t[1] == pytest.approx([first, first + A + 2 * B, first + 2 * (A + 2 * B)])


def test_request_arriving_mid_iteration_waits_for_the_next_one():
    it1 = A + B + C * 10
    t = simulate(CFG, [(0.0, 10, 4), (it1 / 2, 50, 2)])
    # second request joins at iteration 2, which prefills its 50 tokens and runs 2 sequences
    it2 = A + 2 * B + C * 50
    assert t[1][0] == pytest.approx(it1 + it2)
    assert t[0][1] == pytest.approx(it1 + it2)  # the prefill slows the running request too
    assert t[1][1] == pytest.approx(it1 + it2 + A + 2 * B)


def test_ninth_request_on_eight_slots_waits_for_a_slot():
    arrivals = [(0.0, 1, 10)] * 8 + [(0.0, 1, 2)]
    t = simulate(CFG, arrivals)
    first8_done = max(ts[-1] for ts in t[:8])
    assert all(ts[-1] == first8_done for ts in t[:8])
    assert t[8][0] > first8_done  # admitted only after a slot frees
    assert t[8][0] == pytest.approx(first8_done + A + B + C * 1)


def test_waiting_and_running_counts_on_the_engine():
    eng = Engine(CFG)
    seqs = [Seq(n_in=1, target=3, reserve=4) for _ in range(9)]
    for s in seqs:
        eng.submit(s)
    assert eng.begin() == pytest.approx(A + 8 * B + 8 * C)
    assert len(eng.running) == 8 and list(eng.waiting) == [seqs[8]]
    got = eng.end()
    assert got == seqs[:8] and all(s.n_out == 1 for s in got)


def test_kv_budget_blocks_admission_until_kv_is_freed():
    cfg = SimConfig(slots=8, kv_tokens=100, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0)
    # each request reserves 10 + 40 = 50 KV tokens: two fit, the third waits for one to finish
    t = simulate(cfg, [(0.0, 10, 40), (0.0, 10, 40), (0.0, 10, 1)])
    assert t[2][0] > t[0][-1]
    eng = Engine(cfg)
    for _ in range(3):
        eng.submit(Seq(10, 40, 50))
    eng.begin()
    assert len(eng.running) == 2 and len(eng.waiting) == 1 and eng.kv_usage == 1.0


def test_fifo_head_of_line_blocks_smaller_requests():
    cfg = SimConfig(slots=8, kv_tokens=100, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0)
    eng = Engine(cfg)
    big, small = Seq(10, 80, 90), Seq(1, 1, 2)
    eng.submit(Seq(10, 10, 20))
    eng.submit(big)
    eng.submit(small)
    eng.begin()
    assert list(eng.waiting) == [big, small]  # small would fit, but FIFO keeps it behind big


def test_request_larger_than_the_cache_is_refused():
    with pytest.raises(ValueError):
        Engine(SimConfig(kv_tokens=10)).submit(Seq(5, 6, 11))


def test_cancel_and_pause():
    eng = Engine(CFG)
    a, b = Seq(1, 5, 6), Seq(1, 5, 6)
    eng.submit(a)
    eng.submit(b)
    eng.begin()
    eng.cancel(a)  # mid-iteration: it gets no token and frees its KV
    assert eng.end() == [b] and eng.kv_used == 6
    b.paused = True
    assert eng.begin() is None and not eng.has_work()
    b.paused = False
    assert eng.begin() == pytest.approx(A + B)


def test_capacity_formulas():
    cap = capacity(CFG)
    assert cap["saturation_concurrency"] == 8
    assert cap["decode_tokens_per_s_saturated"] == pytest.approx(8 / (A + 8 * B))
    assert cap["itl_idle_s"] == pytest.approx(A + B)
    assert decode_rate(CFG, 3) == pytest.approx(3 / (A + 3 * B))
    kv_bound = capacity(SimConfig(slots=8, kv_tokens=500), prompt_tokens=50, output_tokens=50)
    assert kv_bound["max_running"] == 5


@pytest.mark.parametrize("stagger", [False, True])
@pytest.mark.parametrize("n_in,n_out", [(0, 50), (200, 30), (1000, 7)])
def test_capacity_matches_a_simulated_saturated_steady_state(n_in, n_out, stagger):
    cap = capacity(CFG, prompt_tokens=n_in, output_tokens=n_out)
    # open-loop overload: the queue never empties; staggered = the 8 slots finish out of step
    primer = [(0.0, n_in, k + 1) for k in range(8)] if stagger else []
    times = simulate(CFG, primer + [(0.0, n_in, n_out)] * 400)[len(primer):]
    # window between two request completions well inside the run, so it spans whole batch cycles
    lo, hi = times[40][-1], times[360][-1]
    tokens = sum(lo < x <= hi for ts in times for x in ts)
    assert tokens / (hi - lo) == pytest.approx(cap["output_tokens_per_s"], rel=0.01)
    done = sum(lo < ts[-1] <= hi for ts in times)
    assert done / (hi - lo) == pytest.approx(cap["requests_per_s"], rel=0.03)


def test_capacity_matches_pure_decode_steady_state():
    cfg = SimConfig(slots=4, iter_base=A, iter_per_seq=B, iter_per_prefill_token=0)
    times = simulate(cfg, [(0.0, 1, 1000)] * 4)
    span = times[0][-1] - times[0][0]
    assert 4 * 999 / span == pytest.approx(capacity(cfg)["decode_tokens_per_s_saturated"], rel=1e-9)

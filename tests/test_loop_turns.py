"""Issue 37 item 1: a request's own work waits while the streams' reads are due.

At 100 streams x 100 tokens/s on one process at a fifth of a core, one first token in ten was
read together with the second (timed one token interval late): requests that end together (one
server iteration gives them their last token) were each accounted, and each user's next request
sent, all in the event-loop iteration that read their ends, 10-30 ms without a poll. The first
tokens of the requests just sent arrived while their group was still being accounted. Requests
now take turns (transport/turns.py): past TURN seconds of one iteration, a request's accounting
and its next send wait for the next iteration, after the reads.
"""

from __future__ import annotations

import json

import pytest
from support import read_jsonl, run_cli

from llm_locust.sim.process import SimProcess
from llm_locust.transport import turns

# A locustfile whose adapter spends 4 ms of CPU on every event it parses (the first token of a
# stream, its end), not on the token events told by their template (the pump's reads): a stand-in,
# ten times over, for what a stream's first read costs (the general way, a template learnt).
HEAVY_LOCUSTFILE = """
import time

from llm_locust.protocols.openai import OpenAIAdapter
from llm_locust.users import StreamingUser  # noqa: F401

_feed = OpenAIAdapter.feed


def _heavy_feed(self, payload, state):
    end = time.perf_counter() + 0.004
    while time.perf_counter() < end:  # CPU, not a wait: time.sleep would yield to the hub
        pass
    return _feed(self, payload, state)


OpenAIAdapter.feed = _heavy_feed
"""


@pytest.mark.timing  # whether the client read in time: never beside the slow tier's parallel shards
def test_first_tokens_are_read_before_the_second_while_requests_are_accounted(tmp_path):
    """16 users in step (spawned together, 4 tokens 60 ms apart each): their requests end in one
    server iteration, and 16 accountings of 25 ms follow. In one loop iteration (the old code)
    that held every read for 400 ms: the next requests' first and second tokens arrived in it and
    were read together, the first timed 60 ms late. Taking turns, the loop polls every ~27 ms."""
    locustfile = tmp_path / "heavy.py"
    locustfile.write_text(HEAVY_LOCUSTFILE)
    results, records, tokens = tmp_path / "r.json", tmp_path / "rec.jsonl", tmp_path / "sim.jsonl"
    paced = dict(iter_base=0.05, iter_per_seq=0.0, iter_per_prefill_token=0.0)  # a token every 50 ms
    with SimProcess(slots=32, **paced, token_log=str(tokens)) as sim:
        p = run_cli(
            "-f", str(locustfile), "--host", sim.url, "--api", "openai-completions", "--model", "llm-locust-sim",
            "-u", "16", "-r", "16", "-t", "4s", "--max-tokens", "10", "--server-metrics", "off",
            "--results", str(results), "--record-log", str(records), timeout=120,
        )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    written = {r["id"]: r["t_tokens"] for r in read_jsonl(tokens) if r["outcome"] == "ok"}
    firsts = late = 0
    for r in read_jsonl(records):
        t_tok = written.get(r["id"])
        if r["outcome"] != "ok" or t_tok is None or len(r["chunks"]) != 10:
            continue
        assert t_tok[1] - t_tok[0] > 0.03  # the simulator wrote them apart: read together is the client's
        firsts += 1
        late += r["chunks"][1] == r["chunks"][0]
    assert firsts >= 40, p.stdout[-2000:]
    # not 0: an OS that takes the CPU from the client for 30 ms joins two tokens now and then
    assert late <= firsts // 20, f"{late} of {firsts} first tokens read with the second"
    together = json.loads(results.read_text())["summary"]["client"]["read_together"]
    assert together["first_together"] <= late  # what the run reports (the requests it measured)


def test_a_turn_lets_the_next_iteration_poll_first():
    """take_turn waits for a new loop iteration only once the current one has run for TURN."""
    import time

    import gevent

    turns.take_turn()  # notes the iteration (a fresh one: no wait)
    it = gevent.get_hub().loop.iteration
    turns.take_turn()
    assert gevent.get_hub().loop.iteration == it  # well within TURN: no wait
    end = time.perf_counter() + 2 * turns.TURN
    while time.perf_counter() < end:
        pass
    turns.take_turn()
    assert gevent.get_hub().loop.iteration > it  # past TURN: it waited for the next iteration

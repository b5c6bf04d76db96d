"""Issue 24 item 6 (the message): a ladder step in which nothing finished said "no request was
sent" even when a request was sent and in flight the whole step. early_stop now says that no
request finished, and what became of the step's requests."""

from __future__ import annotations

import dataclasses

from test_saturation import fake

from llm_locust.analysis.saturation import early_stop


def test_a_step_whose_request_stayed_in_flight_says_so():
    assert early_stop([fake(1, 1, 0, ok=0, sent=1)], {}) == (
        "step 1 (1 users): no request finished (1 sent, still in flight at the step's end)"
    )


def test_a_step_whose_requests_were_cancelled_at_its_end_says_so():
    step = dataclasses.replace(fake(2, 4, 0, ok=0, sent=4), cancelled=4)
    assert early_stop([step], {}) == (
        "step 2 (4 users): no request finished (4 sent, 4 cancelled at the step's end, none answered)"
    )


def test_a_step_that_sent_nothing_does_not_claim_nothing_was_in_flight():
    assert early_stop([fake(1, 1, 0, ok=0, sent=0)], {}) == (
        "step 1 (1 users): no request finished (none sent in the step; any in flight were sent before it)"
    )

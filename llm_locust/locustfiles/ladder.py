"""Stepped load: `--ladder concurrency:1..64` (closed loop), `--ladder rate:1..16:+1` (open loop,
Poisson or constant arrivals) or `--ladder speed:0.5,1,2,4` (trace replay at each speed).

The shape runs the ladder and picks the user class: streaming users for concurrency ladders,
one open-loop dispatcher per worker process for rate and speed ladders.
"""

from llm_locust.users import LadderShape, ReplayUser, StreamingUser  # noqa: F401


class OpenLoop(ReplayUser):
    pass


class Ladder(LadderShape):
    pass

"""Stepped load and saturation search:

    locust -f locustfiles/ladder.py --headless --host URL --ladder concurrency:1..64
    locust -f locustfiles/ladder.py --headless --host URL --ladder rate:1..16:+1 --arrivals poisson
    locust -f locustfiles/ladder.py --headless --host URL --ladder speed:0.5,1,2 --trace FILE

The per-step table and the saturation verdict are printed at the end and kept in --results.
"""

from llm_locust.locustfiles.ladder import Ladder, OpenLoop, StreamingUser  # noqa: F401

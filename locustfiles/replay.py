"""Open-loop, timestamp-faithful trace replay (conversations kept in order, with their history).

    locust -f locustfiles/replay.py --headless -u 1 --host URL --trace FILE --speed 2
    locust -f locustfiles/replay.py --master --headless -u N ...   # N = number of workers

One user per worker process is enough: each process's dispatcher sends its share of the trace,
and the test stops by itself when the whole window has been replayed.
"""

from llm_locust.locustfiles.replay import TraceReplay  # noqa: F401

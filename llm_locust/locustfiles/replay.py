"""Open-loop, timestamp-faithful trace replay (conversations kept in order, with their history).

One user per worker process is enough: each process's dispatcher sends its share of the trace,
and the test stops by itself when the whole window has been replayed.
"""

from llm_locust.users import ReplayUser


class TraceReplay(ReplayUser):
    pass

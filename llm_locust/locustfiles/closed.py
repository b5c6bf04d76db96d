"""The default locustfile: closed-loop streaming users replaying the workload's records.

`llm-locust run` uses it when no -f is given; `locust -f locustfiles/streaming.py` is the same.
"""

from llm_locust.users import StreamingUser  # noqa: F401

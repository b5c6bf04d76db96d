"""The default locustfile: closed-loop streaming users replaying the workload's records.

`llm-locust run` uses it when no -f is given; the repository's `locustfiles/streaming.py` imports the same user.
"""

from llm_locust.users import StreamingUser  # noqa: F401

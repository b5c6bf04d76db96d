"""Closed-loop streaming users: `locust -f locustfiles/streaming.py --host URL --api openai-chat`."""

from llm_locust.locustfiles.closed import StreamingUser  # noqa: F401

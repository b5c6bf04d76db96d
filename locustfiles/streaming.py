"""Closed-loop streaming users: `locust -f locustfiles/streaming.py --host URL --api openai-chat`."""

from llm_locust.locustfile import StreamingUser  # noqa: F401

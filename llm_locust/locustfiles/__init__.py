"""The locustfiles `llm-locust run` picks by mode; each is a one-liner over `llm_locust.users`."""

"""llm_locust.runtime."""

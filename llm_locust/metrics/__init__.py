"""llm_locust.metrics."""

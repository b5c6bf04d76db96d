"""llm_locust.analysis."""

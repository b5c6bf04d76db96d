"""llm_locust.settings."""

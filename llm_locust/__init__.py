"""llm-locust: load testing for LLM inference servers on Locust."""

__version__ = "0.1.0"

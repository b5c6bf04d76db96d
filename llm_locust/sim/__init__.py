"""Simulated inference server: a continuous-batching model behind an OpenAI-compatible HTTP API.

Self-contained: imports nothing from the rest of llm_locust (nor locust/gevent).
"""

from llm_locust.sim.engine import Engine, Seq, SimConfig, capacity, decode_rate, iteration_time, simulate
from llm_locust.sim.process import SimProcess

__all__ = ["Engine", "Seq", "SimConfig", "SimProcess", "capacity", "decode_rate", "iteration_time", "simulate"]

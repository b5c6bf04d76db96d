"""What a locustfile builds on: the users, the open-loop dispatcher and the ladder shape.

Importing this module wires llm-locust into Locust (its options, the metrics hub, the summary and
the results) through `llm_locust.runtime.plugin`: it is the one public entry for locustfiles,
`from llm_locust.users import LLMUser`, and nothing inside the package imports it.
"""

from llm_locust.runtime import plugin  # noqa: F401  (registers options and listeners on import)
from llm_locust.runtime.closed_loop import LLMUser, StreamingUser
from llm_locust.runtime.replay_shares import ReplayUser
from llm_locust.runtime.send import LLMFailure
from llm_locust.runtime.shapes import LadderShape

__all__ = ["LLMFailure", "LLMUser", "LadderShape", "ReplayUser", "StreamingUser"]

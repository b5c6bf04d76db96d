"""An agent loop: the model may call a tool (a local Python function here); its result goes back
to the model, until it answers without a tool call or after MAX_STEPS steps.

    llm-locust run -f locustfiles/agent.py --host URL --model M -u 4 -t 2m

Each model call is a row of Locust's table ("agent step 1", "agent step 2", ...), timed like any
request: tool-call tokens count as output tokens, and TTFT is the time to the first of them.
"""

import json

from locust import task

from llm_locust.users import LLMUser

MAX_STEPS = 4
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]


def add(a: float, b: float) -> float:
    return a + b


LOCAL_TOOLS = {"add": add}


def run_tool(call: dict) -> str:
    """The tool's answer as text; a bad call becomes an error text the model sees, as agents do."""
    try:
        args = json.loads(call["arguments"] or "{}")
        return json.dumps(LOCAL_TOOLS[call["name"]](**args))
    except (KeyError, TypeError, ValueError) as e:
        return f"error: {type(e).__name__}: {e}"


class Agent(LLMUser):
    @task
    def solve(self):
        messages = [{"role": "user", "content": "What is 2 + 3? Use the add tool."}]
        for step in range(1, MAX_STEPS + 1):
            reply = self.llm.chat(messages, max_tokens=64, tools=TOOLS, keep_text=True, name=f"agent step {step}")
            if not reply.ok or not reply.tool_calls:
                return  # an answer (or a failure, counted): the task is done
            messages.append(
                {
                    "role": "assistant",
                    "content": reply.text or None,
                    "tool_calls": [
                        {
                            "id": c["id"] or f"call_{i}",
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for i, c in enumerate(reply.tool_calls)
                    ],
                }
            )
            for i, c in enumerate(reply.tool_calls):
                messages.append({"role": "tool", "tool_call_id": c["id"] or f"call_{i}", "content": run_tool(c)})

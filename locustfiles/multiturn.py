"""A chat whose next turn depends on the reply: each user asks, reads the answer, and asks a
follow-up built from it, for three turns; then starts a new conversation.

    llm-locust run -f locustfiles/multiturn.py -u 4 -t 1m            # the simulator
    llm-locust run -f locustfiles/multiturn.py --host URL -u 16 -t 5m

Each turn is a row of Locust's table ("turn 1", "turn 2", "turn 3") and a request in every
llm-locust figure; the history grows by each reply, as a real conversation's does.
"""

from locust import task

from llm_locust.users import LLMUser

QUESTIONS = ["Name a planet.", "What is the capital of France?", "Give me a number between 1 and 10."]


class Conversation(LLMUser):
    @task
    def talk(self):
        messages = [{"role": "user", "content": QUESTIONS[self.llm_turns % len(QUESTIONS)]}]
        for turn in range(1, 4):
            reply = self.llm.chat(messages, max_tokens=32, keep_text=True, name=f"turn {turn}")
            if not reply.ok:
                return  # counted as a failure of this turn; the next conversation starts afresh
            messages += [
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": f"Say more about: {reply.text[-80:]}"},
            ]
        self.llm_turns += 1

    def on_start(self):
        super().on_start()
        self.llm_turns = 0

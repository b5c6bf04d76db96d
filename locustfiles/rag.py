"""A RAG flow: embed the question, rerank a few local documents against it, then ask the chat
model with the two best documents in the prompt.

    llm-locust run -f locustfiles/rag.py -u 4 -t 1m                        # the built-in simulator
    llm-locust run -f locustfiles/rag.py --host URL --model CHAT_MODEL -u 4 -t 2m

Rows of Locust's table: "embed" (/v1/embeddings), "rerank" (/v1/rerank), "chat"
(/v1/chat/completions). Against a real deployment the three are often different models (or
servers): set EMBED_MODEL and RERANK_MODEL in the environment (default: the run's model).
"""

import os
import random

from locust import task

from llm_locust.users import LLMUser

DOCUMENTS = [
    "The warranty covers manufacturing defects for two years from the date of purchase.",
    "Orders ship within three business days; express delivery arrives the next day.",
    "Returns are accepted within thirty days if the item is unused and in its box.",
    "The battery lasts about ten hours of video playback and charges fully in two hours.",
    "Support is open on weekdays from nine to five; the chat answers at any hour.",
    "A lost password can be reset from the sign-in page with the account's email address.",
]
QUESTIONS = [
    "How long does the battery last?",
    "Can I return an item I opened?",
    "When will my order ship?",
    "What does the warranty cover?",
    "How do I reset my password?",
]
EMBED_MODEL = os.environ.get("EMBED_MODEL") or None
RERANK_MODEL = os.environ.get("RERANK_MODEL") or None


class Rag(LLMUser):
    @task
    def answer(self):
        question = random.choice(QUESTIONS)
        # the retrieval step a vector store would answer; its latency is what is measured here
        emb = self.llm.embed([question], model=EMBED_MODEL, name="embed")
        if not emb.ok:
            return  # counted as a failure of "embed"
        ranked = self.llm.rerank(question, DOCUMENTS, model=RERANK_MODEL, name="rerank")
        if not ranked.ok:
            return
        context = "\n".join(f"- {DOCUMENTS[i]}" for i in ranked.ranked()[:2])
        self.llm.chat(
            [
                {"role": "system", "content": f"Answer from these documents only:\n{context}"},
                {"role": "user", "content": question},
            ],
            max_tokens=64,
            name="chat",
        )

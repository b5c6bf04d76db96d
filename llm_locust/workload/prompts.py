"""Prompts of a given approximate token count, without a tokenizer.

Words come from a vocabulary of common English words that BPE tokenizers (GPT, Llama, SmolLM)
encode as one token each when preceded by a space, so N words ~ N tokens. Issue 3 adds exact
lengths with a real tokenizer.
"""

from __future__ import annotations

import random

VOCAB = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can who out about up into them some could time only these two may first then do any "
    "like my now over such our man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since "
    "against go came right used take three"
).split()


class PromptSynth:
    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def prompt(self, n_tokens: int) -> str:
        n = max(1, n_tokens)
        choice = self._rng.choice
        return " ".join(choice(VOCAB) for _ in range(n))

"""Audio for multimodal chat requests: seeded synthetic WAV clips as OpenAI ``input_audio`` parts.

A clip is 16-bit mono PCM at 16 kHz (what speech models resample to), ``seconds`` long, made of
seeded noise shaped by a few seeded tones (so it does not compress, as speech does not), built
with the standard library only (``wave``). Each (seconds, index) clip is encoded once and kept as
its base64 text: the request path only looks it up. The part is OpenAI's chat form, which vLLM
takes for audio models:

    {"type": "input_audio", "input_audio": {"data": "<base64 WAV>", "format": "wav"}}
"""

from __future__ import annotations

import base64
import io
import math
import random
import struct
import wave
from typing import Any

RATE = 16_000
MAX_SECONDS = 600.0


class AudioMaker:
    """Seeded WAV clips as base64, encoded once per (seconds, index); (base64 text, bytes)."""

    def __init__(self, seed: int = 0, *, distinct: int = 16) -> None:
        self.seed = int(seed)
        self.distinct = max(1, int(distinct))
        self._cache: dict[tuple[float, int], tuple[str, int]] = {}

    def clip(self, seconds: float, index: int = 0) -> tuple[str, int]:
        if not 0 < seconds <= MAX_SECONDS:
            raise ValueError(f"audio clips must be 0-{MAX_SECONDS:g} s long, got {seconds:g}")
        key = (round(float(seconds), 3), index % self.distinct)
        got = self._cache.get(key)
        if got is None:
            data = wav_bytes(seconds, random.Random(f"llm-locust-audio/{self.seed}/{key[0]}/{key[1]}"))
            got = self._cache[key] = (base64.b64encode(data).decode("ascii"), len(data))
        return got


def wav_bytes(seconds: float, rng: random.Random) -> bytes:
    n = int(RATE * seconds)
    tones = [(rng.uniform(120, 900), rng.uniform(0.1, 0.3)) for _ in range(3)]
    samples = []
    for i in range(n):
        t = i / RATE
        v = sum(a * math.sin(2 * math.pi * f * t) for f, a in tones) + rng.uniform(-0.2, 0.2)
        samples.append(max(-32767, min(32767, int(v * 32767 * 0.8))))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(struct.pack(f"<{n}h", *samples))
    return buf.getvalue()


def audio_part(b64: str) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}

#!/usr/bin/env python3
"""Write a tiny random-weight Qwen2-Audio audio-language model (HF dir) sharing SmolLM2's tokenizer.

Useless as a model (random weights), but a real Qwen2-Audio graph that vLLM's CPU build loads and
runs: a Whisper-style audio encoder (transformers' Qwen2AudioEncoder, which vLLM runs as is), a
linear projector and a Qwen2 text model. It lets the tests send audio clips to a real vLLM server
and check its token accounting. The Whisper feature extractor turns a clip into 100 mel frames a
second (hop 160 at 16 kHz); the encoder's two stride-2 steps make a clip of F frames
((F - 1) // 2 + 1 - 2) // 2 + 1 ``<|AUDIO|>`` tokens (25 for 1 s), between ``<|audio_bos|>`` and
``<|audio_eos|>``: TOKENS_PER_SECOND_CLIP = 27 prompt tokens for a 1 s clip.

Qwen2-Audio rather than Ultravox: transformers carries its config, model, processor and feature
extractor (Ultravox's processor is remote code), so this script builds and self-checks it offline,
and vLLM's module runs transformers' encoder. vLLM decodes WAV with `soundfile` (the vLLM venv gets
it from scripts/real-servers.sh); 16 kHz clips need no resampling (no torchaudio, no PyAV).

Shape: audio encoder d_model 32, 2 layers, 2 heads, FFN 64, 128 mel bins, 1500 positions (30 s,
Whisper's window); text Qwen2 hidden 128, 2 layers, 2 heads x head_dim 64 (vLLM's CPU attention
has no kernel for head_dim 16), FFN 256, tied embedding; vocab = SmolLM2's 49152 + the 3 audio
tokens. Weights drawn after ``torch.manual_seed(SEED)``, saved as bfloat16 safetensors, so the
output is deterministic. The chat template is SmolLM2's ChatML with list content rendered part by
part: text parts as they are, ``<|audio_bos|><|AUDIO|><|audio_eos|>`` for each audio part (vLLM
expands ``<|AUDIO|>``).

Usage: make_tiny_alm.py SMOLLM2_HF_DIR OUT_DIR [--seed N]
(run with the vLLM venv's python: it needs torch and transformers). Cached by OUT_DIR/.stamp
(scripts/tiny_hf_model.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tiny_hf_model import cached_main  # scripts/: this script's own folder is on sys.path

SAMPLE_RATE = 16_000
MEL_BINS = 128
HOP = 160
CHUNK_S = 30
AUDIO_D = 32
AUDIO_LAYERS = 2
AUDIO_HEADS = 2
AUDIO_FFN = 64
MAX_SOURCE_POSITIONS = CHUNK_S * SAMPLE_RATE // HOP // 2  # 1500: the encoder's conv1 stride 2
TEXT_HIDDEN = 128  # head_dim 64: vLLM's CPU attention has no kernel for head_dim 16
TEXT_LAYERS = 2
TEXT_HEADS = 2
TEXT_FFN = 256
MAX_POSITIONS = 2048
AUDIO_TOKEN = "<|AUDIO|>"
AUDIO_BOS = "<|audio_bos|>"
AUDIO_EOS = "<|audio_eos|>"
ADDED_TOKENS = [AUDIO_TOKEN, AUDIO_BOS, AUDIO_EOS]


def audio_tokens(seconds: float) -> int:
    """<|AUDIO|> tokens of a clip: mel frames, then the encoder's conv (stride 2) and pooling (stride 2)."""
    frames = int(seconds * SAMPLE_RATE) // HOP
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


TOKENS_PER_SECOND_CLIP = audio_tokens(1.0) + 2  # + <|audio_bos|> <|audio_eos|>

# SmolLM2's ChatML, with list content rendered part by part (text as is, the audio wrapper per audio part)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}"
    "{%- elif part['type'] in ('audio', 'input_audio', 'audio_url') %}{{- '"
    + AUDIO_BOS
    + AUDIO_TOKEN
    + AUDIO_EOS
    + "' }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def stamp_text(seed: int, tok_stamp: str) -> str:
    import hashlib
    from importlib.metadata import version  # not `import transformers`: the cached path stays fast

    recipe = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return (
        f"script={recipe} seed={seed} transformers={version('transformers')} "
        f"audio={AUDIO_D}x{AUDIO_LAYERS}/{MEL_BINS} tokenizer={tok_stamp}"
    )


def fix_text_model_names(path: Path) -> None:
    """transformers 5.19 saves the text model's body as ``language_model.model.model.*``; Qwen2-Audio
    checkpoints (what vLLM's loader and transformers' own legacy mapping read) name it
    ``language_model.model.*`` (``language_model.lm_head`` is right as it is). Rename in place."""
    from safetensors.torch import load_file, save_file

    bad = "language_model.model.model."
    tensors = load_file(str(path))
    if not any(k.startswith(bad) for k in tensors):
        return
    fixed = {("language_model.model." + k[len(bad) :] if k.startswith(bad) else k): v for k, v in tensors.items()}
    assert len(fixed) == len(tensors)
    save_file(fixed, str(path), metadata={"format": "pt"})


def build(tok_dir: Path, out: Path, seed: int) -> None:
    import numpy as np
    import torch
    from transformers import (
        AutoTokenizer,
        Qwen2AudioConfig,
        Qwen2AudioEncoderConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        Qwen2Config,
        WhisperFeatureExtractor,
    )

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    tok.add_special_tokens({"additional_special_tokens": ADDED_TOKENS})
    ids = tok.convert_tokens_to_ids(ADDED_TOKENS)
    vocab = len(tok)
    assert ids == list(range(vocab - len(ADDED_TOKENS), vocab)), (ids, vocab)
    audio_id = tok.convert_tokens_to_ids(AUDIO_TOKEN)
    tok.chat_template = CHAT_TEMPLATE

    enc = Qwen2AudioEncoderConfig(
        num_mel_bins=MEL_BINS,
        encoder_layers=AUDIO_LAYERS,
        encoder_attention_heads=AUDIO_HEADS,
        encoder_ffn_dim=AUDIO_FFN,
        d_model=AUDIO_D,
        max_source_positions=MAX_SOURCE_POSITIONS,
    )
    text = Qwen2Config(
        hidden_size=TEXT_HIDDEN,
        intermediate_size=TEXT_FFN,
        num_hidden_layers=TEXT_LAYERS,
        num_attention_heads=TEXT_HEADS,
        num_key_value_heads=TEXT_HEADS,
        vocab_size=vocab,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )
    cfg = Qwen2AudioConfig(
        audio_config=enc.to_dict(),
        text_config=text.to_dict(),
        audio_token_index=audio_id,
        tie_word_embeddings=True,
        vocab_size=vocab,
    )
    torch.manual_seed(seed)
    model = Qwen2AudioForConditionalGeneration(cfg).to(torch.bfloat16).eval()  # as vLLM runs it
    model.generation_config.do_sample = False  # vLLM takes its default sampling from here

    fe = WhisperFeatureExtractor(
        feature_size=MEL_BINS, sampling_rate=SAMPLE_RATE, hop_length=HOP, chunk_length=CHUNK_S, n_fft=400
    )
    proc = Qwen2AudioProcessor(
        feature_extractor=fe,
        tokenizer=tok,
        chat_template=CHAT_TEMPLATE,
        audio_token=AUDIO_TOKEN,
        audio_bos_token=AUDIO_BOS,
        audio_eos_token=AUDIO_EOS,
    )
    assert len(tok) == vocab, (len(tok), vocab)

    model.save_pretrained(str(out), safe_serialization=True)
    proc.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    fix_text_model_names(out / "model.safetensors")

    # self-check: the saved processor turns one 1 s audio part into TOKENS_PER_SECOND_CLIP tokens,
    # and the model runs on it
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe"},
                {"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}},
            ],
        }
    ]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert prompt.count(AUDIO_TOKEN) == 1 and prompt.count(AUDIO_BOS) == 1, prompt
    wrapper = AUDIO_BOS + AUDIO_TOKEN + AUDIO_EOS
    n_text = len(tok(prompt.replace(wrapper, "")).input_ids)
    proc2 = Qwen2AudioProcessor.from_pretrained(str(out))
    clip = np.random.default_rng(seed).uniform(-0.5, 0.5, SAMPLE_RATE).astype(np.float32)
    enc_in = proc2(text=prompt, audio=[clip], sampling_rate=SAMPLE_RATE, return_tensors="pt")
    n_audio = int((enc_in.input_ids == audio_id).sum())
    assert n_audio == audio_tokens(1.0), (n_audio, audio_tokens(1.0))
    assert enc_in.input_ids.shape[1] == n_text + TOKENS_PER_SECOND_CLIP, (enc_in.input_ids.shape, n_text)
    with torch.no_grad():
        gen = model.generate(**enc_in, max_new_tokens=3, do_sample=False)
    assert gen.shape[1] <= enc_in.input_ids.shape[1] + 3, gen.shape
    # the renamed file loads back into the same weights (no tensor left at a fresh random init)
    back = Qwen2AudioForConditionalGeneration.from_pretrained(str(out), dtype=torch.bfloat16).eval()
    mine, theirs = model.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys(), set(mine) ^ set(theirs)
    assert all(torch.equal(mine[k], theirs[k]) for k in mine), [k for k in mine if not torch.equal(mine[k], theirs[k])]
    with open(out / "llm_locust_provenance.json", "w") as f:
        json.dump(
            {
                "seed": seed,
                "tokenizer": str(tok_dir),
                "audio_token_id": audio_id,
                "sample_rate": SAMPLE_RATE,
                "hop_length": HOP,
                "mel_bins": MEL_BINS,
                "audio_tokens_1s": audio_tokens(1.0),
                "tokens_per_1s_clip": TOKENS_PER_SECOND_CLIP,
            },
            f,
            indent=2,
        )
    print(
        f"Qwen2AudioForConditionalGeneration: vocab {vocab} (<|AUDIO|> = {audio_id}), audio encoder d {AUDIO_D} x "
        f"{AUDIO_LAYERS} layers, text hidden {TEXT_HIDDEN} x {TEXT_LAYERS} layers, {TOKENS_PER_SECOND_CLIP} tokens "
        f"a 1 s clip ({audio_tokens(1.0)} <|AUDIO|>), seed {seed}, files {sorted(os.listdir(out))}"
    )


def main(argv: list[str] | None = None) -> int:
    return cached_main("make_tiny_alm.py", "tiny audio LM", __doc__, build, stamp_text, argv)


if __name__ == "__main__":
    raise SystemExit(main())

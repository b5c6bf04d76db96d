#!/usr/bin/env python3
"""Write a tiny random-weight Idefics3 vision-language model (HF dir) sharing SmolLM2's tokenizer.

Useless as a model (random weights), but a real Idefics3 graph (the architecture of SmolVLM) that
vLLM's CPU build loads and runs in well under a second a request: a SigLIP-style vision tower, the
pixel-shuffle connector, and a llama text model. It lets the tests send images to a real vLLM
server and check its token accounting. Without image splitting every image, whatever its size, is
resized to one IMAGE_SIZE square and becomes TOKENS_PER_IMAGE prompt tokens:
``<fake_token_around_image><global-img>`` + IMAGE_SEQ_LEN x ``<image>`` + ``<fake_token_around_image>``,
IMAGE_SEQ_LEN = (IMAGE_SIZE / PATCH_SIZE)^2 / SCALE_FACTOR^2 = 16, so 19 tokens an image.

Llava was the first choice but vLLM 0.32's llava module imports transformers' pixtral image
processor, which needs torchvision, and the vLLM venv has none (scripts/real-servers.sh removes
the GPU build PyPI gives). Idefics3's code paths need no torchvision.

Shape: vision image 64, patch 8, hidden 32, 2 layers, 2 heads; text llama hidden 128, 2 layers,
2 heads x head_dim 64 (vLLM's CPU attention has no kernel for head_dim 16), FFN 256, tied
embedding; vocab = SmolLM2's 49152 + 4 added special tokens (Idefics3's image tokens and
``<end_of_utterance>``). Weights drawn after ``torch.manual_seed(SEED)``, saved as bfloat16
safetensors (~17 MB, most of it the embedding), so the output is deterministic. The chat template
is SmolLM2's ChatML with list content rendered part by part: text parts as they are, ``<image>``
for each image part (vLLM expands it).

Usage: make_tiny_vlm.py SMOLLM2_HF_DIR OUT_DIR [--seed N]
(run with the vLLM venv's python: it needs torch and transformers). Cached by OUT_DIR/.stamp
(scripts/tiny_hf_model.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tiny_hf_model import cached_main  # scripts/: this script's own folder is on sys.path

IMAGE_SIZE = 64
PATCH_SIZE = 8
VISION_HIDDEN = 32
VISION_LAYERS = 2
VISION_HEADS = 2
TEXT_HIDDEN = 128  # head_dim 64: vLLM's CPU attention has no kernel for head_dim 16
TEXT_LAYERS = 2
TEXT_HEADS = 2
TEXT_FFN = 256
MAX_POSITIONS = 2048
SCALE_FACTOR = 2  # Idefics3's pixel shuffle: SCALE_FACTOR^2 patches make one token
IMAGE_TOKEN = "<image>"
FAKE_TOKEN = "<fake_token_around_image>"
GLOBAL_TOKEN = "<global-img>"
# what Idefics3Processor expects in the vocabulary, added as single special tokens
ADDED_TOKENS = [FAKE_TOKEN, IMAGE_TOKEN, "<end_of_utterance>", GLOBAL_TOKEN]
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
# an image without splitting: <fake_token_around_image><global-img><image>*IMAGE_SEQ_LEN<fake_token_around_image>
TOKENS_PER_IMAGE = IMAGE_SEQ_LEN + 3

# SmolLM2's ChatML, with list content rendered part by part (text as is, <image> per image part)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}"
    "{%- elif part['type'] in ('image', 'image_url') %}{{- '" + IMAGE_TOKEN + "' }}"
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
        f"image={IMAGE_SIZE}/{PATCH_SIZE} tokenizer={tok_stamp}"
    )


def build(tok_dir: Path, out: Path, seed: int) -> None:
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
    )

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    tok.add_special_tokens({"additional_special_tokens": ADDED_TOKENS})
    ids = tok.convert_tokens_to_ids(ADDED_TOKENS)
    vocab = len(tok)
    assert ids == list(range(vocab - len(ADDED_TOKENS), vocab)), (ids, vocab)
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    tok.chat_template = CHAT_TEMPLATE

    vision = Idefics3VisionConfig(
        hidden_size=VISION_HIDDEN,
        intermediate_size=VISION_HIDDEN * 2,
        num_hidden_layers=VISION_LAYERS,
        num_attention_heads=VISION_HEADS,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
    )
    text = LlamaConfig(
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
    cfg = Idefics3Config(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_id=image_id,
        scale_factor=SCALE_FACTOR,
        tie_word_embeddings=True,
        vocab_size=vocab,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(cfg).to(torch.bfloat16).eval()  # as vLLM runs it
    model.generation_config.do_sample = False  # vLLM takes its default sampling from here

    # no splitting: every image, whatever its size, is resized to one IMAGE_SIZE square (the
    # "global" image) and becomes IMAGE_SEQ_LEN <image> tokens between its wrapper tokens
    improc = Idefics3ImageProcessor(
        do_resize=True,
        size={"longest_edge": IMAGE_SIZE},
        do_image_splitting=False,
        max_image_size={"longest_edge": IMAGE_SIZE},
    )
    proc = Idefics3Processor(
        image_processor=improc, tokenizer=tok, image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE
    )
    assert len(tok) == vocab, (len(tok), vocab)  # the processor's own additions are ours already

    model.save_pretrained(str(out), safe_serialization=True)
    proc.save_pretrained(str(out))
    tok.save_pretrained(str(out))

    # self-check: the saved processor turns one image part into TOKENS_PER_IMAGE tokens, and the
    # model runs on it
    from PIL import Image

    msgs = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": {"url": "x"}}],
        }
    ]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert prompt.count(IMAGE_TOKEN) == 1, prompt
    n_text = len(tok(prompt.replace(IMAGE_TOKEN, "")).input_ids)
    proc2 = Idefics3Processor.from_pretrained(str(out))
    enc = proc2(text=prompt, images=[[Image.new("RGB", (80, 48), (10, 20, 30))]], return_tensors="pt")
    n_img = int((enc.input_ids == image_id).sum())
    assert n_img == IMAGE_SEQ_LEN, (n_img, IMAGE_SEQ_LEN)
    assert enc.input_ids.shape[1] == n_text + TOKENS_PER_IMAGE, (enc.input_ids.shape, n_text, TOKENS_PER_IMAGE)
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert gen.shape[1] <= enc.input_ids.shape[1] + 3, gen.shape
    with open(out / "llm_locust_provenance.json", "w") as f:
        json.dump(
            {
                "seed": seed,
                "tokenizer": str(tok_dir),
                "image_token_id": image_id,
                "image_seq_len": IMAGE_SEQ_LEN,
                "tokens_per_image": TOKENS_PER_IMAGE,
                "image_size": IMAGE_SIZE,
                "patch_size": PATCH_SIZE,
                "scale_factor": SCALE_FACTOR,
            },
            f,
            indent=2,
        )
    print(
        f"Idefics3ForConditionalGeneration: vocab {vocab} (<image> = {image_id}), vision {IMAGE_SIZE}/{PATCH_SIZE} "
        f"hidden {VISION_HIDDEN}, text hidden {TEXT_HIDDEN} x {TEXT_LAYERS} layers, {TOKENS_PER_IMAGE} tokens "
        f"an image ({IMAGE_SEQ_LEN} <image>), seed {seed}, files {sorted(os.listdir(out))}"
    )


def main(argv: list[str] | None = None) -> int:
    return cached_main("make_tiny_vlm.py", "tiny VLM", __doc__, build, stamp_text, argv)


if __name__ == "__main__":
    raise SystemExit(main())

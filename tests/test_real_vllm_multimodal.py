"""Images in chat requests against a real vLLM (the CPU build) serving a real vision-language model.

The model is tiny and random (Idefics3, the architecture of SmolVLM: a vision tower, pixel shuffle, a
llama text model with SmolLM2's tokenizer), built offline by scripts/make_tiny_vlm.py
(`scripts/real-servers.sh vllm`). Its output means nothing, but vLLM decodes every image the client
sends, runs it through the vision tower and counts its tokens in ``usage.prompt_tokens``: without
image splitting each image becomes (image_size / patch_size)^2 / scale_factor^2 ``<image>`` tokens
plus 3 wrapper tokens, whatever the image's size, which the test computes from the model's config.

Each test runs the real CLI as an open-loop replay (`--replay`) of a small trace, so the number of
requests is exact, and checks what a broken implementation would get wrong:
- text only (`--images 0`): every request's n_in is the server's count and equals the trace's input
  length (the client's prompt, chat template included, is what vLLM counts): the text baseline;
- `--images 2` as PNG and as JPEG: vLLM accepts every request (a malformed data URL or content part
  is a 400), each request's n_in (the server's usage) is the trace's input length plus 2 x the
  model's tokens per image (images not sent, sent once, or sent as text get another count), n_out
  is the server's; the results count exactly 2 images a request and their bytes, which are the
  sizes of the seeded images the client makes.
"""

from __future__ import annotations

import json

import pytest
import realservers

from llm_locust.workload.images import ImageMaker

pytestmark = pytest.mark.real_server

MODEL = "tiny-vlm"
N_RECORDS, GAP_S = 12, 0.15  # the replay: 12 requests over ~1.7 s
OUTPUT_TOKENS = 8
IMAGES, IMAGE_SIZE = 2, (64, 64)
RUN_TIMEOUT_S = 120


def input_tokens(line: int) -> int:
    """The trace's input length of its (1-based) line."""
    return 40 + 8 * (line - 1)


@pytest.fixture(scope="module")
def vlm_server(vllm_python, vllm_vlm_dir):
    """vLLM serving the tiny VLM, up to 4 images a prompt, for this module (its whole process group
    is stopped after it)."""
    srv = realservers.VllmServer(
        vllm_vlm_dir,
        python=vllm_python,
        served_model_name=MODEL,
        max_model_len=1024,
        max_num_seqs=4,
        extra_args=["--limit-mm-per-prompt", json.dumps({"image": 4})],
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def tokens_per_image(vllm_vlm_dir) -> int:
    """What one image costs in prompt tokens, from the model's config (Idefics3 without splitting:
    <fake_token_around_image><global-img> + image_seq_len x <image> + <fake_token_around_image>)."""
    cfg = json.loads((vllm_vlm_dir / "config.json").read_text())
    v = cfg["vision_config"]
    seq = (v["image_size"] // v["patch_size"]) ** 2 // cfg["scale_factor"] ** 2
    proc = json.loads((vllm_vlm_dir / "processor_config.json").read_text())
    assert proc.get("image_seq_len") in (None, seq), proc  # the processor agrees with the model
    assert proc["image_processor"]["do_image_splitting"] is False, proc
    return seq + 3


def replay(url: str, vllm_vlm_dir, tmp_path, *, images: int, fmt: str = "png"):
    """The real CLI, an open-loop replay of N_RECORDS chat requests: (records, results summary, stdout)."""
    return realservers.chat_replay(
        url,
        MODEL,
        vllm_vlm_dir,
        tmp_path,
        ["--images", str(images), "--image-size", "{}x{}".format(*IMAGE_SIZE), "--image-format", fmt],
        n=N_RECORDS,
        gap_s=GAP_S,
        output_tokens=OUTPUT_TOKENS,
        input_tokens=input_tokens,
        timeout_s=RUN_TIMEOUT_S,
    )


def test_text_only_requests_count_what_the_trace_asked(vlm_server, vllm_vlm_dir, tmp_path):
    """The baseline the image runs are measured against: with no images, vLLM's prompt count of
    each request is the trace's input length (the client's tokenizer and the server's agree)."""
    records, summary, _out = replay(vlm_server.url, vllm_vlm_dir, tmp_path, images=0)
    for r in records:
        assert r["n_in"] == input_tokens(int(r["source"].rsplit(":", 1)[1])), r
        assert (r.get("work") or {}).get("images", 0) == 0, r
    assert "images" not in summary, summary["images"]


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_images_reach_vllm_and_cost_their_tokens_and_bytes(vlm_server, vllm_vlm_dir, tmp_path, fmt):
    per_image = tokens_per_image(vllm_vlm_dir)
    assert per_image == 19  # 64 / 8 = 8x8 patches, pixel shuffle 2 -> 16 <image>, + 3 wrapper tokens
    records, summary, out = replay(vlm_server.url, vllm_vlm_dir, tmp_path, images=IMAGES, fmt=fmt)

    # the server's usage: the text (as the text-only run counts it) plus every image's tokens
    for r in records:
        line = int(r["source"].rsplit(":", 1)[1])
        assert r["n_in"] == input_tokens(line) + IMAGES * per_image, (r["n_in"], input_tokens(line), r)

    # the images the client sent: 2 a request, the seeded images' exact sizes (before base64)
    maker = ImageMaker(0)  # the run's --seed (default 0)
    blobs = [maker.image_bytes(IMAGE_SIZE, fmt, i) for i in range(IMAGES)]
    magic = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}[fmt]
    assert all(b.startswith(magic) for b in blobs)
    per_request = sum(len(b) for b in blobs)
    for r in records:
        assert r["work"]["images"] == IMAGES and r["work"]["image_bytes"] == per_request, r["work"]
    img = summary["images"]
    assert img["sent"] == IMAGES * N_RECORDS and img["bytes"] == per_request * N_RECORDS, img
    assert img["per_request"] == IMAGES, img
    assert f"images: {IMAGES * N_RECORDS} sent ({IMAGES:.2f} a request)" in out, out[-2000:]

    ttft = summary["latency"]["ttft"]
    print(
        f"\n[vlm {fmt}] requests {summary['ok']}, {IMAGES} images each ({per_request} bytes a request), "
        f"tokens per image {per_image}, prompt tokens {summary['tokens_in']} "
        f"(text {sum(input_tokens(i + 1) for i in range(N_RECORDS))}), "
        f"TTFT p50 {ttft['p50'] * 1000:.1f} ms, vLLM startup {vlm_server.startup_s:.0f} s"
    )

"""Audio in chat requests against a real vLLM (the CPU build) serving a real audio-language model.

The model is tiny and random (Qwen2-Audio: a Whisper-style audio encoder, a projector, a Qwen2 text
model with SmolLM2's tokenizer), built offline by scripts/make_tiny_alm.py
(`scripts/real-servers.sh vllm`, which also puts soundfile, vLLM's WAV decoder, in the venv). Its
output means nothing, but vLLM decodes every clip the client sends, turns it into mel frames, runs
it through the audio encoder and counts its tokens in ``usage.prompt_tokens``: a clip of F mel frames
(100 a second at 16 kHz, hop 160) becomes ((F - 1) // 2 + 1 - 2) // 2 + 1 ``<|AUDIO|>`` tokens plus
``<|audio_bos|>`` and ``<|audio_eos|>``, which the test computes from the model's processor config.

Each run is the real CLI as an open-loop replay (`--replay`) of a small trace, so the number of
requests is exact; it checks what a broken implementation would get wrong:
- text only (`--audio 0`): every request's n_in is the server's count and equals the trace's input
  length (the client's prompt, chat template included, is what vLLM counts): the text baseline;
- `--audio 1 --audio-seconds 1` and `--audio 2 --audio-seconds 0.5`: vLLM accepts every request (a
  malformed WAV, data or content part is a 400), each request's n_in (the server's usage) is its
  n_in in the text-only run plus N x the model's tokens per clip of that length (clips not sent,
  sent once, cut, resampled or sent as text get another count), n_out is the server's; the results
  count exactly N clips a request and their bytes, which are the sizes of the seeded WAVs the client
  makes.
"""

from __future__ import annotations

import json

import pytest
import realservers

from llm_locust.workload.audio import RATE, AudioMaker

pytestmark = pytest.mark.real_server

MODEL = "tiny-alm"
N_RECORDS, GAP_S = 12, 0.15  # the replay: 12 requests over ~1.7 s
OUTPUT_TOKENS = 8
MAX_CLIPS = 2
RUN_TIMEOUT_S = 120


def input_tokens(line: int) -> int:
    """The trace's input length of its (1-based) line."""
    return 40 + 8 * (line - 1)


line_of = realservers.trace_line


@pytest.fixture(scope="module")
def alm_server(vllm_python, vllm_alm_dir):
    """vLLM serving the tiny audio LM, up to MAX_CLIPS clips a prompt, for this module (its whole
    process group is stopped after it)."""
    srv = realservers.VllmServer(
        vllm_alm_dir,
        python=vllm_python,
        served_model_name=MODEL,
        max_model_len=1024,
        max_num_seqs=4,
        extra_args=["--limit-mm-per-prompt", json.dumps({"audio": MAX_CLIPS})],
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def tokens_per_clip(vllm_alm_dir, seconds: float) -> int:
    """What one clip of `seconds` costs in prompt tokens, from the model's processor config (the
    Whisper feature extractor's rate and hop) and Qwen2-Audio's encoder (conv stride 2, then
    pooling stride 2), plus <|audio_bos|> and <|audio_eos|>; cross-checked with what
    make_tiny_alm.py's own processor check counted for a 1 s clip."""
    proc = json.loads((vllm_alm_dir / "processor_config.json").read_text())
    fe = proc["feature_extractor"]
    assert fe["sampling_rate"] == RATE, fe  # the client's clips need no resampling
    frames = int(seconds * fe["sampling_rate"]) // fe["hop_length"]
    n = ((frames - 1) // 2 + 1 - 2) // 2 + 1 + 2
    assert proc["audio_token"] == "<|AUDIO|>", proc
    cfg = json.loads((vllm_alm_dir / "config.json").read_text())
    tok = json.loads((vllm_alm_dir / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert added["<|AUDIO|>"] == cfg["audio_token_index"], (added, cfg["audio_token_index"])
    if seconds == 1.0:
        prov = json.loads((vllm_alm_dir / "llm_locust_provenance.json").read_text())
        assert prov["tokens_per_1s_clip"] == n, (prov, n)
    return n


def replay(url: str, vllm_alm_dir, tmp_path, *, audio: int, seconds: float = 1.0):
    """The real CLI, an open-loop replay of N_RECORDS chat requests: (records, results summary, stdout)."""
    return realservers.chat_replay(
        url,
        MODEL,
        vllm_alm_dir,
        tmp_path,
        ["--audio", str(audio), "--audio-seconds", f"{seconds:g}"],
        n=N_RECORDS,
        gap_s=GAP_S,
        output_tokens=OUTPUT_TOKENS,
        input_tokens=input_tokens,
        timeout_s=RUN_TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def text_only(alm_server, vllm_alm_dir, tmp_path_factory):
    """The text-only run (`--audio 0`): {trace line: the server's n_in}, and its summary."""
    records, summary, _out = replay(alm_server.url, vllm_alm_dir, tmp_path_factory.mktemp("text"), audio=0)
    for r in records:
        assert (r.get("work") or {}).get("audio", 0) == 0, r
    return {line_of(r): r["n_in"] for r in records}, summary


def test_text_only_requests_count_what_the_trace_asked(text_only):
    """The baseline the audio runs are measured against: with no audio, vLLM's prompt count of
    each request is the trace's input length (the client's tokenizer and the server's agree)."""
    n_in, summary = text_only
    assert n_in == {line: input_tokens(line) for line in range(1, N_RECORDS + 1)}, n_in
    assert "audio" not in summary, summary["audio"]


@pytest.mark.parametrize(("clips", "seconds"), [(1, 1.0), (2, 0.5)])
def test_audio_reaches_vllm_and_costs_its_tokens_and_bytes(
    alm_server, vllm_alm_dir, text_only, tmp_path, clips, seconds
):
    per_clip = tokens_per_clip(vllm_alm_dir, seconds)
    # 100 mel frames a second -> 50 after the conv -> 25 <|AUDIO|> (1 s), 12 (0.5 s); + bos/eos
    assert per_clip == {1.0: 27, 0.5: 14}[seconds]
    records, summary, out = replay(alm_server.url, vllm_alm_dir, tmp_path, audio=clips, seconds=seconds)

    # the server's usage: the text (as the text-only run counted it, request by request) plus
    # every clip's tokens
    base, _ = text_only
    for r in records:
        line = line_of(r)
        assert r["n_in"] - base[line] == clips * per_clip, (r["n_in"], base[line], r)
        assert r["n_in"] == input_tokens(line) + clips * per_clip, (r["n_in"], input_tokens(line), r)

    # the clips the client sent: N a request, the seeded WAVs' exact sizes (before base64)
    maker = AudioMaker(0)  # the run's --seed (default 0)
    sizes = [maker.clip(seconds, i)[1] for i in range(clips)]
    assert all(s == 44 + 2 * int(RATE * seconds) for s in sizes), sizes  # 16-bit mono PCM + the WAV header
    per_request = sum(sizes)
    for r in records:
        assert r["work"]["audio"] == clips and r["work"]["audio_bytes"] == per_request, r["work"]
    aud = summary["audio"]
    assert aud["sent"] == clips * N_RECORDS and aud["bytes"] == per_request * N_RECORDS, aud
    assert aud["per_request"] == clips, aud
    assert f"audio: {clips * N_RECORDS} clips sent ({clips:.2f} a request)" in out, out[-2000:]

    ttft = summary["latency"]["ttft"]
    print(
        f"\n[alm {clips} x {seconds:g} s] requests {summary['ok']}, {clips} clip(s) each ({per_request} bytes a "
        f"request), tokens per clip {per_clip}, prompt tokens {summary['tokens_in']} "
        f"(text-only run {sum(base.values())}), output tokens {summary['tokens_out']}, "
        f"TTFT p50 {ttft['p50'] * 1000:.1f} ms, vLLM startup {alm_server.startup_s:.0f} s"
    )

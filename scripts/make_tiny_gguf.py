#!/usr/bin/env python3
"""Write a tiny random-weight llama GGUF (or, with --rerank, a reranker) sharing SmolLM2's tokenizer.

The model is useless as a language model (random weights) but it is a real llama
graph that llama.cpp loads and runs very fast on a CPU, and because every
``tokenizer.*`` key is copied verbatim from the SmolLM2 GGUF, token counts agree
with SmolLM2 (and with a tokenizer rebuilt from either file).

Shape: 2 layers, hidden 128, 2 heads x head_dim 64 (no GQA), FFN 512, vocab
taken from the source tokenizer, tied output embedding. Weights are drawn from a
seeded normal distribution, so the output file is deterministic for a given
seed and gguf package version.

With ``--rerank`` it writes a tiny reranker instead, for ``llama-server --reranking``
(pooling type RANK): architecture ``qwen3`` (the llama graph plus per-head Q/K RMS norms),
the same shape, pooling type RANK, and a rank head like Qwen3-Reranker's GGUFs: ``cls.output.weight`` with two
rows, labelled ``qwen3.classifier.output_labels = ["yes", "no"]``. llama.cpp (the build of
llama-cpp-python 0.3.36) pools the last token's hidden state for a causal ranker, projects it
with ``cls.output`` and takes a softmax over the two rows; the server's score is the first
("yes"), so every score lies in (0, 1). Without a ``tokenizer.chat_template.rerank`` key the
server feeds ``query tokens + document tokens`` per document (SmolLM2 adds no BOS/EOS), which
is what its ``usage.prompt_tokens`` counts. The scores mean nothing (random weights).

Usage: make_tiny_gguf.py SOURCE.gguf OUT.gguf [--seed N] [--rerank]
Needs the PyPI ``gguf`` package (and numpy).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - exercised only on a bare machine
    sys.exit("make_tiny_gguf.py: the 'gguf' Python package is required (pip install gguf)")

N_LAYER = 2
N_EMBD = 128
HEAD_DIM = 64
N_HEAD = N_EMBD // HEAD_DIM  # 2
N_HEAD_KV = N_HEAD
N_FF = 512
CTX_LEN = 8192
RMS_EPS = 1e-5
ROPE_BASE = 10000.0
INIT_STD = 0.02
RANK_LABELS = ["yes", "no"]  # --rerank: the classifier head's rows (Qwen3-Reranker's labels)
RANK_HEAD_STD = 0.1


def copy_tokenizer(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> int:
    """Copy every tokenizer.* key with its exact GGUF type. Returns the vocab size."""
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            sub_type = field.types[-1]
            if sub_type == gguf.GGUFValueType.ARRAY:
                raise SystemExit(f"nested array in {name!r} is not supported")
            writer.add_key_value(name, value, vtype, sub_type=sub_type)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(name, value, vtype)
    if n_vocab == 0:
        raise SystemExit("source GGUF has no tokenizer.ggml.tokens array")
    return n_vocab


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="GGUF to copy the tokenizer from (SmolLM2)")
    ap.add_argument("out", type=Path, help="output GGUF path")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument(
        "--rerank", action="store_true", help="write a qwen3-architecture reranker with a 2-label cls.output head"
    )
    args = ap.parse_args(argv)

    reader = gguf.GGUFReader(str(args.source))
    arch = "qwen3" if args.rerank else "llama"
    tmp = args.out.with_name(args.out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)

    writer.add_name("tiny-random-qwen3-reranker" if args.rerank else "tiny-random-llama")
    writer.add_context_length(CTX_LEN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    n_vocab = copy_tokenizer(reader, writer)
    writer.add_vocab_size(n_vocab)
    if args.rerank:
        writer.add_classifier_output_labels(RANK_LABELS)
        writer.add_pooling_type(gguf.PoolingType.RANK)  # as Qwen3-Reranker's GGUFs declare

    rng = np.random.default_rng(args.seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        # numpy shape (rows=out, cols=in); GGUF stores ne = [in, out].
        return (rng.standard_normal((rows, cols), dtype=np.float32) * INIT_STD).astype(np.float16)

    def norm(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    writer.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", norm(N_EMBD))
    # No output.weight: llama.cpp ties the output projection to token_embd.
    kv_dim = N_HEAD_KV * HEAD_DIM
    for i in range(N_LAYER):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", norm(N_EMBD))
        writer.add_tensor(p + "attn_q.weight", mat(N_EMBD, N_EMBD))
        writer.add_tensor(p + "attn_k.weight", mat(kv_dim, N_EMBD))
        writer.add_tensor(p + "attn_v.weight", mat(kv_dim, N_EMBD))
        if args.rerank:  # qwen3: RMS norm of each head's q and k before RoPE
            writer.add_tensor(p + "attn_q_norm.weight", norm(HEAD_DIM))
            writer.add_tensor(p + "attn_k_norm.weight", norm(HEAD_DIM))
        writer.add_tensor(p + "attn_output.weight", mat(N_EMBD, N_EMBD))
        writer.add_tensor(p + "ffn_norm.weight", norm(N_EMBD))
        writer.add_tensor(p + "ffn_gate.weight", mat(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF))

    if args.rerank:
        # the rank head, drawn last so the llama file's weights stay what they were; a wider
        # spread than the trunk's so the two logits differ by about one per document (std 1
        # would put them ~20 apart: every score ~1e-9)
        head = rng.standard_normal((len(RANK_LABELS), N_EMBD), dtype=np.float32) * RANK_HEAD_STD
        writer.add_tensor("cls.output.weight", head.astype(np.float16))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, args.out)
    print(
        f"wrote {args.out} ({arch}{' reranker' if args.rerank else ''}, vocab {n_vocab}, "
        f"{N_LAYER} layers, hidden {N_EMBD}, "
        f"{N_HEAD} heads x {HEAD_DIM}, ffn {N_FF}, seed {args.seed}, "
        f"{args.out.stat().st_size / 1e6:.1f} MB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

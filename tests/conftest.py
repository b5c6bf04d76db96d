import os
import platform
import time

import alone
import pytest
import realservers
import support
import tiers
from hypothesis import HealthCheck, settings

# grpc-core reads this when grpc is first imported: in a test process that used grpcio, its fork
# handlers made 2-4 of 60 subprocess spawns abort (exit -6, "epoll_wait error: Bad file
# descriptor"), and the tests spawn many (transport/grpc_io.py `_grpc` says the same).
# (tests/ is on sys.path: rootdir conftest, no __init__.py)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# The tests never read the user's own config (a `llm-locust calibrate --write` ceiling would change
# what `--workers auto` plans): XDG_CONFIG_HOME is a directory of the tests' own, empty unless a
# test writes there (set before any CLI process is forked, so they all inherit it).
if "LLM_LOCUST_TEST_CONFIG" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _config = os.environ["LLM_LOCUST_TEST_CONFIG"] = os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(
        prefix="llm-locust-config-"
    )
    _owner = os.getpid()
    atexit.register(lambda: os.getpid() == _owner and shutil.rmtree(_config, ignore_errors=True))

# Hypothesis: the same examples on every run and every machine (derandomized, no example database),
# so a red CI can be reproduced; `pytest --hypothesis-profile explore` draws fresh ones (and keeps
# failing examples in .hypothesis/, which git ignores).
settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile("repeatable")

# The results' provenance reads platform.platform(), which runs `uname -p` once per process and
# caches it: read it here, so that the fast tier's guard (no process started) does not count it.
platform.platform()


def pytest_addoption(parser):
    parser.addoption(
        "--shard",
        metavar="K/N:TIER",
        help="run shard K of N of the selected tests, dealt by module with TIER's durations (scripts/suite.py)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config, items):
    """Marks by tier before -m selects (tests/tiers.py), then this process's shard of what it kept."""
    tiers.apply(items)
    yield
    spec = config.getoption("--shard")
    if not spec:
        return
    part, _, tier_name = spec.partition(":")
    k, n = (int(x) for x in part.split("/"))
    keep = tiers.shard(items, k, n, tier_name)
    kept = {id(i) for i in keep}
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A `timing` test runs alone when the shards of its tier run side by side (tests/alone.py); its
    JUnit case says so (the property ``alone``: scripts/suite.py deals shards by the time not alone)."""
    by_itself = item.get_closest_marker("timing") is not None
    if by_itself:
        item.user_properties.append(("alone", "1"))
    with alone.turn(by_itself):
        yield


_FAST_CALL = pytest.StashKey[tuple]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The fast tier's guard: no process, and a call within the tier's CPU and wall limits."""
    if tiers.tier(item) != "fast":
        yield
        return
    tiers.warm_libraries()  # a library's first-use cache (matplotlib's fonts) is not the test's
    t0, c0 = time.perf_counter(), time.process_time()
    with tiers.Guard(item) as guard:
        yield
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    item.stash[_FAST_CALL] = (cpu, wall, guard.started and guard.message())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or _FAST_CALL not in item.stash or report.failed:
        return
    cpu, wall, started = item.stash[_FAST_CALL]
    why = started or tiers.too_long(item, cpu, wall)
    if why:
        report.outcome = "failed"
        report.longrepr = why


def _require_real(path, what: str, hint: str = realservers.PROVISION_HINT):
    """Skip when a real-server artifact is missing locally; fail in CI, where it must exist."""
    if path is not None:
        return path
    support.missing(f"{what} not found under {realservers.cache_dir()}; {hint}")


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


# vLLM servers kept at once by `vllm_servers` (~4 GiB each: its KV cache and its engine's memory).
VLLM_KEPT = 2


@pytest.fixture(scope="session")
def vllm_servers(vllm_python, vllm_model_dir):
    """Real vLLM servers (CPU build, SmolLM2, served as "smollm2") started once per pytest process
    for each set of VllmServer keyword arguments, and shared by the modules that ask for the same
    set (each takes ~30 s to start). At most VLLM_KEPT run at once: asking for another stops the one
    used longest ago; `vllm_servers.release(**kwargs)` stops one that nothing asks for any more. All
    are stopped (their whole process groups) at the end of the session."""
    running: dict[str, realservers.VllmServer] = {}

    # named apart from `sims`' `get`: tests/tiers.py reads functions by name, and a shared name
    # would put every test of a simulator in the real-server tier
    def vllm_for(**kwargs):
        key = repr(sorted(kwargs.items()))
        if key in running:
            running[key] = running.pop(key)  # the most recently used last
            return running[key]
        while len(running) >= VLLM_KEPT:
            running.pop(next(iter(running))).stop()
        srv = realservers.VllmServer(vllm_model_dir, python=vllm_python, **kwargs)
        srv.start()
        running[key] = srv
        return srv

    def release(**kwargs):
        srv = running.pop(repr(sorted(kwargs.items())), None)
        if srv is not None:
            srv.stop()

    vllm_for.release = release  # type: ignore[attr-defined]
    yield vllm_for
    for srv in running.values():
        srv.stop()


def _vllm_kwargs(module) -> dict:
    """The VllmServer keyword arguments a module asks `vllm_server` for."""
    return {"served_model_name": "smollm2", **getattr(module, "VLLM_SERVER_KWARGS", realservers.VLLM_SHARED)}


def _asked_later(request, kwargs: dict) -> bool:
    """Whether a test after this module, in this pytest process, asks `vllm_server` for `kwargs`."""
    items = request.session.items
    mine = [i for i, item in enumerate(items) if item.module is request.module]
    return any(
        "vllm_server" in item.fixturenames and _vllm_kwargs(item.module) == kwargs
        for item in items[(mine[-1] + 1 if mine else 0) :]
    )


@pytest.fixture(scope="module")
def vllm_server(request, vllm_servers):
    """The real vLLM server a module asks for: ``VLLM_SERVER_KWARGS = {...}`` in the module
    (VllmServer keyword arguments; realservers.VLLM_SHARED when it does not say), shared with every
    other module of this pytest process that asks for the same (`vllm_servers`), and stopped after
    the last of them (tests/tiers.py deals those modules to one shard, one after another; a vLLM
    server nothing asks for would hold ~4 GiB while another shard starts its own). A test must leave
    it as it found it: counters are read as differences, never as absolutes."""
    kwargs = _vllm_kwargs(request.module)
    yield vllm_servers(**kwargs)
    if not _asked_later(request, kwargs):
        vllm_servers.release(**kwargs)


@pytest.fixture(scope="session")
def sims(tmp_path_factory):
    """Simulators started once per session (per shard) and shared by the modules that ask for the
    same options: ``sims(slots=8, iter_base=0.002, token_log=True)``; ``token_log=True`` gives the
    simulator a per-token log (``sim.token_log``, a Path). A test that changes a simulator's state
    (faults by flag, its counters read as absolute) starts its own SimProcess instead."""
    from llm_locust.sim.process import SimProcess

    running: dict[str, SimProcess] = {}

    def get(**options):
        key = repr(sorted(options.items()))
        if key not in running:
            log = tmp_path_factory.mktemp("sim") / "tokens.jsonl" if options.get("token_log") else None
            sim = SimProcess(**{**options, "token_log": str(log) if log else None}).start()
            sim.token_log = log
            running[key] = sim
        return running[key]

    yield get
    for sim in running.values():
        sim.stop()

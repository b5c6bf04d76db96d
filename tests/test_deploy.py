"""deploy/: Prometheus config and rules (promtool), the compose file (compose-spec JSON schema), the
Kubernetes manifests (kubernetes-validate, offline schemas), the Grafana dashboards (provisioning
rules, every query parses), and every load-test / soak / GPU / inference-server panel query run
through a real Prometheus scraping a real master + 2 workers run against the simulator, with the
GPU sidecar in fake mode."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from support import cli_argv, free_port, missing, need_binary

from llm_locust.sim.process import SimProcess

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))

# What Grafana substitutes before a query reaches Prometheus (test values: 1 s scrapes).
GRAFANA_VARS = {
    "$__rate_interval": "5s",
    "$__interval_ms": "1000",
    "$__interval": "1s",
    "$__range_s": "60",
    "$__range_ms": "60000",
    "$__range": "1m",
    "${datasource}": "llm-locust-prometheus",
    "$datasource": "llm-locust-prometheus",
}


def need_module(name: str, pip: str):
    if importlib.util.find_spec(name) is None:
        missing(f"{pip} not installed (pip install {pip}; CI installs it with pip install -e .[test])")
    return __import__(name)


def substitute(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    left = re.findall(r"\$\{?\w+", expr)
    assert not left, f"unsubstituted Grafana variable {left} in {expr!r}"
    return expr


def load_dashboard(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(dash: dict) -> list[dict]:
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return [p for p in out if p.get("type") != "row"]


def queries(dash: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every Prometheus annotation."""
    out = []
    for p in panels(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((f"{dash['uid']} / {p['title']} / {t.get('refId')}", t["expr"]))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append((f"{dash['uid']} / annotation {a['name']}", a["expr"]))
    return out


def get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


# --- (a) promtool --------------------------------------------------------------------------------


def test_promtool_checks_config_and_rules():
    promtool = need_binary("promtool")
    for args in (
        ["check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        ["check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")],
    ):
        r = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def test_alert_rules_cover_errors_gpu_memory_and_client_saturation():
    rules = [
        r for g in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"] for r in g["rules"]
    ]
    exprs = " ".join(r["expr"] for r in rules)
    assert 'llm_locust_requests_total{outcome!="ok"}' in exprs
    assert "DCGM_FI_DEV_FB_USED" in exprs
    assert "llm_locust_worker_cpu_percent) > 90" in exprs


def test_scrape_config_covers_master_sidecar_and_server():
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) >= {"llm-locust-master", "gpu-sidecar", "inference-server"}
    assert jobs["llm-locust-master"]["static_configs"][0]["targets"] == ["master:9646"]


# --- (b) compose ---------------------------------------------------------------------------------


def compose_schema() -> dict:
    """The compose-spec JSON schema. Not fetchable here: docker-compose 1.29.2's wheel (PyPI, Apache-2.0)
    ships it as compose/config/compose_spec.json. Looked for in $COMPOSE_SPEC_SCHEMA,
    tests/fixtures/compose_spec.json, then an installed `compose` package (pip install --no-deps
    docker-compose==1.29.2: its own dependency pins conflict with this project's)."""
    candidates = [os.environ.get("COMPOSE_SPEC_SCHEMA", ""), str(ROOT / "tests" / "fixtures" / "compose_spec.json")]
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.submodule_search_locations:
        candidates += [str(Path(p) / "config" / "compose_spec.json") for p in spec.submodule_search_locations]
    for c in candidates:
        if c and Path(c).is_file():
            return json.loads(Path(c).read_text())
    missing("compose_spec.json not found (see compose_schema's docstring)")


def test_compose_file_matches_the_compose_spec_schema():
    jsonschema = need_module("jsonschema", "jsonschema")
    schema = compose_schema()
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    cls = jsonschema.Draft201909Validator  # the schema declares draft 2019-09
    errors = sorted(cls(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_services_and_paths():
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = doc["services"]
    assert set(services) >= {"master", "worker", "prometheus", "grafana", "gpu-sidecar"}
    master = " ".join(services["master"]["command"])
    assert "--master" in master and "--headless" in master
    assert "--prometheus-port=9646" in master and "--prometheus-host=0.0.0.0" in master
    assert "ports" not in services["worker"] and "container_name" not in services["worker"]  # --scale worker=N
    for service in services.values():  # every bind-mounted file or folder exists
        for v in service.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), src
    assert (
        ROOT / services["master"]["build"]["context"].replace("..", ".") / services["master"]["build"]["dockerfile"]
    ).is_file()


def test_dockerfile_builds_on_the_official_locust_image():
    text = (DEPLOY / "Dockerfile").read_text()
    arg = re.search(r"^ARG LOCUST_VERSION=(\S+)", text, re.M)
    assert arg and re.search(r"^FROM locustio/locust:\$\{LOCUST_VERSION\}\s*$", text, re.M)
    assert re.search(r"^RUN pip install .*/opt/llm-locust", text, re.M)
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), part


# --- (c) Kubernetes ------------------------------------------------------------------------------


def k8s_docs():
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def test_kubernetes_manifests_validate():
    kv = need_module("kubernetes_validate", "kubernetes-validate")
    version = kv.latest_version()
    checked = 0
    for name, doc in k8s_docs():
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # Prometheus Operator CRDs: no schema ships with kubernetes-validate (checked below)
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")
        checked += 1
    assert checked >= 6


def test_kubernetes_manifests_have_the_required_parts():
    kinds = {}
    for _, doc in k8s_docs():
        kinds.setdefault(doc["kind"], []).append(doc)
    assert {"Deployment", "Service", "DaemonSet", "ConfigMap", "ServiceMonitor"} <= set(kinds)
    deployments = {d["metadata"]["name"]: d for d in kinds["Deployment"]}
    master = deployments["llm-locust-master"]["spec"]["template"]
    args = master["spec"]["containers"][0]["args"]
    assert "--master" in args and "--prometheus-port=9646" in args and "--prometheus-host=0.0.0.0" in args
    assert master["metadata"]["annotations"]["prometheus.io/port"] == "9646"
    assert "--worker" in deployments["llm-locust-worker"]["spec"]["template"]["spec"]["containers"][0]["args"]
    ds = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    assert ds["nodeSelector"]
    # the ServiceMonitor selects the master Service's labels and a port it names
    sm = kinds["ServiceMonitor"][0]["spec"]
    svc = kinds["Service"][0]
    assert sm["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}
    names = {d["metadata"]["name"] for d in kinds["ConfigMap"]}
    assert {"llm-locust-locustfiles", "llm-locust-traces"} <= names


# --- (d) dashboards ------------------------------------------------------------------------------


def test_dashboards_exist():
    assert {p.stem for p in DASHBOARDS} == {"load-test", "gpu", "inference-server", "soak"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_follows_grafana_provisioning_rules(path):
    dash = load_dashboard(path)
    assert "__inputs" not in dash and "${DS_" not in path.read_text()
    assert dash["id"] is None
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dash["uid"])
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels(dash):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"


def test_dashboard_uids_are_unique_and_match_the_datasource_provisioning():
    uids = [load_dashboard(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))
    ds = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    for p in DASHBOARDS:
        assert load_dashboard(p)["templating"]["list"][0]["current"]["value"] == uid
    prov = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "llm-locust.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_dashboard_query_parses(path):
    promql = need_module("promql_parser", "promql-parser")
    qs = queries(load_dashboard(path))
    assert qs
    for where, expr in qs:
        try:
            promql.parse(substitute(expr))
        except ValueError as e:
            pytest.fail(f"{where}: {e}\n{expr}")


def test_load_test_dashboard_has_the_asked_panels():
    text = (DEPLOY / "grafana" / "dashboards" / "load-test.json").read_text()
    for needle in (
        "llm_locust_output_tokens_total",
        "llm_locust_requests_total",
        "llm_locust_ttft_seconds_bucket",
        "llm_locust_itl_seconds_bucket",
        "histogram_quantile(0.99",
        "histogram_quantile(0.5",
        "llm_locust_in_flight",
        "llm_locust_users",
        "llm_locust_step",
    ):
        assert needle in text, needle
    dash = load_dashboard(DEPLOY / "grafana" / "dashboards" / "load-test.json")
    assert any("llm_locust_step" in a.get("expr", "") for a in dash["annotations"]["list"])


# --- (e) a real Prometheus scraping a real run ---------------------------------------------------


@pytest.fixture(scope="module")
def prometheus_on_live_run(tmp_path_factory):
    """Master + 2 workers against the simulator, the GPU sidecar in fake mode, and Debian's Prometheus
    scraping all three every second with deploy/prometheus/prometheus.yml's jobs and rules."""
    prometheus = need_binary("prometheus")
    tmp = tmp_path_factory.mktemp("deploy")
    master_port, sidecar_port, prom_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen] = []
    logs = []

    def start(cmd, name):
        log = open(tmp / f"{name}.log", "w")
        logs.append(log)
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=tmp)
        procs.append(p)
        return p

    with SimProcess(slots=16) as sim:
        try:
            run = start(
                cli_argv(
                    "run",
                    "--host",
                    sim.url,
                    "--workers",
                    "2",
                    "-u",
                    "6",
                    "-t",
                    "45s",
                    "--max-tokens-cap",
                    "32",
                    "--prometheus-port",
                    str(master_port),
                    "--results",
                    str(tmp / "r.json"),
                ),
                "run",
            )
            start(
                [sys.executable, "-m", "llm_locust.gpu.sidecar", "--fake", "1", "--port", str(sidecar_port)], "sidecar"
            )
            cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
            cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
            targets = {
                "llm-locust-master": f"127.0.0.1:{master_port}",
                "gpu-sidecar": f"127.0.0.1:{sidecar_port}",
                "inference-server": f"127.0.0.1:{sim.port}",
            }  # the simulator serves vLLM names
            for job in cfg["scrape_configs"]:
                job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
            shutil.copy(DEPLOY / "prometheus" / "alerts.yml", tmp / "alerts.yml")
            (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
            start(
                [
                    prometheus,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                "prometheus",
            )
            api = f"http://127.0.0.1:{prom_port}/api/v1"

            def query(expr: str) -> dict:
                return get_json(f"{api}/query?" + urllib.parse.urlencode({"query": expr}))

            # wait (bounded) until every job is up and the master has reported requests for a while
            deadline = time.monotonic() + 60
            ready = False
            while time.monotonic() < deadline and not ready:
                time.sleep(1)
                try:
                    up = query("up")["data"]["result"]
                    reqs = query("sum(llm_locust_requests_total)")["data"]["result"]
                    samples = query("count_over_time(llm_locust_users[1m])")["data"]["result"]
                except OSError:
                    continue
                ready = (
                    len(up) == 3
                    and all(r["value"][1] == "1" for r in up)
                    and reqs
                    and float(reqs[0]["value"][1]) > 0
                    and samples
                    and float(samples[0]["value"][1]) >= 12
                )
                assert run.poll() is None or ready, (
                    f"the run ended before Prometheus had it: {(tmp / 'run.log').read_text()[-3000:]}"
                )
            assert ready, f"Prometheus never saw all three targets up with data: {query('up')}"
            yield query, api, tmp
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            for log in logs:
                log.close()


@pytest.mark.parametrize("name", ["load-test", "soak", "gpu", "inference-server"])
def test_every_panel_query_runs_against_prometheus(prometheus_on_live_run, name):
    query, _, _ = prometheus_on_live_run
    dash = load_dashboard(DEPLOY / "grafana" / "dashboards" / f"{name}.json")
    empty_panels = []
    for p in panels(dash):
        with_data = 0
        for t in p["targets"]:
            r = query(substitute(t["expr"]))
            assert r["status"] == "success", (p["title"], t["expr"], r)
            with_data += bool(r["data"]["result"])
        if not with_data:
            empty_panels.append(p["title"])
    for a in dash["annotations"]["list"]:
        if a.get("expr"):
            assert query(substitute(a["expr"]))["status"] == "success"
    if name == "load-test":
        # every panel shows data (a panel may hold a ladder-only series such as offered load)
        assert not empty_panels, empty_panels
    if name in ("gpu", "inference-server"):
        # the fake sidecar and the simulator's vLLM names fill the DCGM and vLLM panels
        expected = {
            "gpu": ["GPU utilisation (DCGM_FI_DEV_GPU_UTIL)", "Power (DCGM_FI_DEV_POWER_USAGE)"],
            "inference-server": ["vLLM running / waiting", "vLLM KV cache usage", "vLLM server TTFT P50 / P99"],
        }[name]
        assert not set(expected) & set(empty_panels), empty_panels


def test_alert_rules_load_and_evaluate_in_prometheus(prometheus_on_live_run):
    query, api, _ = prometheus_on_live_run
    deadline = time.monotonic() + 15
    while True:  # rules evaluate every second; wait for one evaluation of each
        groups = get_json(f"{api}/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if (
            rules
            and all(r.get("lastEvaluation", "").startswith("0001") is False for r in rules)
            or time.monotonic() > deadline
        ):
            break
        time.sleep(1)
    assert len(rules) == 5
    for r in rules:
        assert r["health"] == "ok", r

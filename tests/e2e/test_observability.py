"""What operators see: a real Prometheus scraping the gateway, the Grafana dashboard's queries,
the rules, and the service units."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml  # type: ignore[import-untyped]

from gateway.metrics import GatewayMetrics
from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway, free_port, start_gateway

pytestmark = pytest.mark.e2e
OPS = Path(__file__).resolve().parents[2] / "ops"
RULES = OPS / "prometheus" / "rules.yml"
DASHBOARD = OPS / "grafana" / "onemac-gateway.json"
NEEDS_PROMETHEUS = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="Debian's prometheus is not installed (make test installs it as root with apt; "
    "else: apt-get install prometheus)",
)


def exported_families() -> set[str]:
    """Every family the gateway exports, with the sample suffixes Prometheus sees."""
    text = GatewayMetrics().exposition().decode()
    families: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        families.add(name)
        if kind == "counter":
            families.add(f"{name}_total")
        if kind == "histogram":
            families.update(f"{name}_{suffix}" for suffix in ("bucket", "sum", "count"))
    return families


def recorded_rules() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def names_in(expr: str) -> set[str]:
    return set(re.findall(r"\b(gateway[:_][A-Za-z0-9_:]+)", expr))


def test_every_dashboard_and_rule_query_uses_a_real_metric() -> None:
    known = exported_families() | recorded_rules()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    groups = yaml.safe_load(RULES.read_text())["groups"]
    exprs += [rule["expr"] for group in groups for rule in group["rules"]]
    assert len(dashboard["panels"]) >= 10
    missing = {name for expr in exprs for name in names_in(expr)} - known
    assert not missing, f"queries name metrics the gateway does not export: {missing}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_rules_and_the_config() -> None:
    subprocess.run(["promtool", "check", "rules", str(RULES)], check=True, capture_output=True)
    subprocess.run(
        ["promtool", "check", "config", str(OPS / "prometheus" / "prometheus.yml")],
        check=True,
        capture_output=True,
    )


@NEEDS_PROMETHEUS
def test_a_real_prometheus_scrapes_and_records(gateway: RunningGateway, tmp_path: Path) -> None:
    gw = gateway  # the shared gateway: what is scraped needs nothing fresh
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "onemac-gateway",
                "static_configs": [{"targets": [f"127.0.0.1:{gw.port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(tmp_path / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        client = gw.openai()
        deadline = time.monotonic() + 60
        series: list[dict[str, object]] = []
        while time.monotonic() < deadline and not series:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
            time.sleep(1)
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/query",
                    params={"query": "gateway:requests:rate1m"},
                    timeout=5,
                ).json()
            except httpx.HTTPError:
                continue
            series = [s for s in answer["data"]["result"] if float(s["value"][1]) > 0]
        assert series, (tmp_path / "prometheus.log").read_text()[-2000:]
        targets = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5).json()
        assert targets["data"]["activeTargets"][0]["health"] == "up"
    finally:
        prometheus.terminate()
        prometheus.wait(20)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    project = Path(__file__).resolve().parents[2]
    unit = (OPS / "service" / "onemac-gateway.service").read_text()
    installed = tmp_path / "onemac-gateway.service"
    installed.write_text(unit.replace("@PROJECT@", str(project)))
    assert (project / ".venv" / "bin" / "python").exists() or sys.prefix
    result = subprocess.run(
        ["systemd-analyze", "verify", str(installed)], capture_output=True, text=True
    )
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "onemac-gateway.service" in line
    ]
    assert not problems, problems


def test_the_launchd_plist_is_well_formed() -> None:
    import plistlib

    plist = plistlib.loads((OPS / "service" / "com.onemac.gateway.plist").read_bytes())
    assert plist["Label"] == "com.onemac.gateway"
    assert plist["ProgramArguments"][-2:] == ["gateway", "serve"]


def test_log_level_debug_shows_prefill_chunks_and_job_waits(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``log_level = "debug"`` reaches the gateway's own loggers (Litestar's default logging
    config held them at INFO): a prompt longer than one chunk logs each chunk, and the job its
    wait for the slot."""
    long_text = " ".join(f"Line {i} of the notes." for i in range(60))
    messages = [{"role": "user", "content": f"{long_text} Summarize."}]
    gateway = start_gateway(tmp_path_factory.mktemp("debug"), {"log_level": "debug"})
    try:
        reply = gateway.openai().chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=2,
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
        log = gateway.log()
    finally:
        gateway.stop()
    assert re.search(r"prefill chunk: \d+ tokens in [\d.]+ ms \(at \d+\)", log)
    assert re.search(r"job \S+ \(user\) starts after [\d.]+ ms", log)

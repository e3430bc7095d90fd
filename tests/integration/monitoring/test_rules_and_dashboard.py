"""The chart's alerts and dashboard, for real: ``promtool check rules`` / ``promtool test rules``
on charts/xmq/files/xmq-alerts.yaml, and a real Prometheus scraping a running two-node cluster
(real Redis, real broker processes, MQTT traffic) where every dashboard panel's query returns
data and every metric an alert uses exists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.http_probe import wait_port
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import free_port, running_redis

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
ALERTS = REPO / "charts" / "xmq" / "files" / "xmq-alerts.yaml"
DASHBOARD = REPO / "charts" / "xmq" / "files" / "xmq-dashboard.json"
RULE_TESTS = Path(__file__).resolve().parent / "xmq-alerts.test.yaml"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/setup-system (Debian prometheus)")
    return path


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_checks_the_rules() -> None:
    out = _run(_tool("promtool"), "check", "rules", str(ALERTS))
    assert "SUCCESS: 7 rules found" in out


def test_promtool_rule_tests_pass() -> None:
    assert "SUCCESS" in _run(_tool("promtool"), "test", "rules", str(RULE_TESTS))


def test_every_alert_has_a_rule_test() -> None:
    alerts = {rule["alert"] for rule in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert alerts == tested


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


def _alert_metrics() -> set[str]:
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    return {name for rule in rules for name in re.findall(r"\b(xmq_[a-z0-9_]+|up)\b", rule["expr"])}


class Prometheus:
    """A real ``prometheus`` process scraping ``targets`` every second, with the alerts."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [{"job_name": "xmq", "static_configs": [{"targets": targets}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                _tool("prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, "prometheus exited (see prometheus.log)"
            try:
                url = f"http://127.0.0.1:{self.port}/-/ready"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def metric_names(self) -> set[str]:
        url = f"http://127.0.0.1:{self.port}/api/v1/label/__name__/values"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return set(json.load(answer)["data"])

    def rules_health(self) -> list[str]:
        url = f"http://127.0.0.1:{self.port}/api/v1/rules"
        with urllib.request.urlopen(url, timeout=5) as answer:
            groups = json.load(answer)["data"]["groups"]
        return [rule["health"] for group in groups for rule in group["rules"]]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _has_data(result: list[dict[str, Any]]) -> bool:
    return any(item["value"][1] not in {"NaN", "+Inf", "-Inf"} for item in result)


@pytest.fixture
def scraped_cluster(tmp_path: Path) -> Iterator[tuple[ClusterNodes, Prometheus]]:
    with running_redis() as redis_server:
        nodes = ClusterNodes(redis_server, "monitoring", metrics=True)
        prometheus: Prometheus | None = None
        try:
            nodes.start_many(2)
            targets = [f"127.0.0.1:{wait_port(nodes.nodes[i], 'metrics')}" for i in (1, 2)]
            prometheus = Prometheus(tmp_path, targets)
            prometheus.wait_ready()
            yield nodes, prometheus
        finally:
            if prometheus is not None:
                prometheus.stop()
            nodes.stop_all()


def test_prometheus_scrapes_a_cluster_and_every_panel_has_data(
    scraped_cluster: tuple[ClusterNodes, Prometheus],
) -> None:
    nodes, prometheus = scraped_cluster
    subscriber = PahoClient(nodes.port(1), "mon-sub")
    subscriber.connect()
    subscriber.subscribe("mon/#", qos=1)
    routed(nodes.port(1), nodes.port(2), "mon/probe", subscriber)
    # A client that takes packets of at most 256 bytes: bigger messages to it are dropped.
    small = PahoClient(nodes.port(2), "mon-small")
    small.connect(properties=props(PacketTypes.CONNECT, MaximumPacketSize=256))
    small.subscribe("big/#", qos=0)
    publisher = PahoClient(nodes.port(2), "mon-pub")
    publisher.connect()
    stop = threading.Event()

    def traffic() -> None:  # steady cross-node traffic while Prometheus scrapes
        while not stop.is_set():
            for _ in range(20):
                publisher.publish("mon/load", b"x" * 64, qos=1, wait=False)
            publisher.publish("big/one", b"y" * 2048, qos=0)
            stop.wait(0.1)

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    try:
        pending = dict(_panel_queries())
        deadline = time.monotonic() + 90
        while pending and time.monotonic() < deadline:
            for title, expr in list(pending.items()):
                if _has_data(prometheus.query(expr)):
                    del pending[title]
            time.sleep(1)
        assert not pending, f"panels without data: {pending}"
        missing = _alert_metrics() - prometheus.metric_names()
        assert not missing, f"alerts use metrics no broker exposes: {missing}"
        assert set(prometheus.rules_health()) == {"ok"}
    finally:
        stop.set()
        worker.join(timeout=10)
        for client in (publisher, small, subscriber):
            client.close()

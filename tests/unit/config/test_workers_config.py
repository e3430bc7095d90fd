"""``workers``: needs the cluster, and what each worker process is (node id, ports)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from xmq.app.cli import _admin_urls, main
from xmq.app.worker_plan import (
    WORKER_HTTP_PORT_ENV,
    admin_ports,
    worker_config,
    worker_count,
)
from xmq.config import load_config
from xmq.config.reference_doc import describe_errors
from xmq.contract.pod import REDIS_URL_ENV


@pytest.fixture(autouse=True)
def _no_redis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.delenv("XMQ_WORKERS", raising=False)


def test_workers_without_redis_are_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "xmq.yaml"
    path.write_text("workers: 2\n")
    with pytest.raises(ValidationError) as caught:
        load_config(path)
    (line,) = describe_errors(caught.value)
    assert line.startswith("workers: Value error, workers=2 needs the cluster")
    assert "cluster.redis_url" in line
    assert main(["check-config", str(path)]) == 2
    assert "workers: Value error, workers=2 needs the cluster" in capsys.readouterr().err
    assert main(["serve", "--config", str(path)]) == 2


def test_one_per_cpu_needs_redis_too_and_redis_from_the_environment_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValidationError, match="workers=0 needs the cluster"):
        load_config(workers=0)
    monkeypatch.setenv(REDIS_URL_ENV, "redis://127.0.0.1:1/0")
    assert load_config(workers=0).workers == 0
    assert worker_count(load_config(workers=0)) >= 1
    monkeypatch.setenv("XMQ_WORKERS", "3")
    assert load_config().workers == 3


def test_each_worker_has_its_node_id_link_port_and_http_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """metrics.port is the supervisor's (the pod's probes): worker i serves port + 1 + i."""
    config = load_config(
        node_id="pod-a-0",
        workers=3,
        cluster={"redis_url": "redis://r", "link_port": 7884},
        metrics={"port": 9090},
    )
    second = worker_config(config, 2)
    assert (second.node_id, second.cluster.link_port, second.metrics.port) == (
        "pod-a-2",
        7886,
        9093,
    )
    assert worker_config(config, 0).node_id == "pod-a-0"
    assert worker_config(load_config(node_id="n-4", workers=1), 1).node_id == "n-5"
    ephemeral = load_config(
        workers=2, cluster={"redis_url": "r", "link_port": 0}, metrics={"port": 0}
    )
    assert worker_config(ephemeral, 1).cluster.link_port == 0
    assert worker_config(ephemeral, 1).metrics.port == 0
    monkeypatch.setenv(WORKER_HTTP_PORT_ENV, "40123")  # the free port its supervisor chose
    assert worker_config(ephemeral, 1).metrics.port == 40123
    assert admin_ports(config) == [9091, 9092, 9093]
    assert admin_ports(load_config(metrics={"port": 9090})) == [9090]  # one process: its own


def test_drain_reaches_every_worker(tmp_path: Path) -> None:
    path = tmp_path / "xmq.yaml"
    path.write_text("workers: 2\ncluster: {redis_url: 'redis://r'}\nmetrics: {port: 19300}\n")
    assert _admin_urls(str(path)) == ["http://127.0.0.1:19301", "http://127.0.0.1:19302"]

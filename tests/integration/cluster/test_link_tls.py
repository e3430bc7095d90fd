"""Node links in mutual TLS: nodes of one CA link and deliver; a foreign certificate cannot link."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import TestCertificateAuthority
from tests.support.cluster_nodes import routed, wait_for
from tests.support.paho_client import PahoClient
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys

CLUSTER = "link-tls"


def _node_yaml(redis_url: str, cert: Path, key: Path, ca: Path) -> str:
    return (
        "cluster:\n"
        f"  redis_url: {redis_url}\n"
        f"  name: {CLUSTER}\n"
        "  lease_ttl_s: 2\n"
        "  link_host: 127.0.0.1\n"
        "  link_port: 0\n"
        f"  link_tls: {{cert_file: '{cert}', key_file: '{key}', ca_file: '{ca}'}}\n"
        "metrics: {enabled: false}\n"
        "log: {level: INFO}\n"
    )


@pytest.fixture(scope="module")
def nodes(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, BrokerProcess]]:
    """``tls-1`` and ``tls-2`` hold certificates of the cluster CA; ``tls-0`` trusts that CA
    but holds a certificate of another CA (it dials both: the smaller id dials)."""
    directory = tmp_path_factory.mktemp("link-tls")
    (directory / "foreign").mkdir()
    ca = TestCertificateAuthority(directory)
    foreign = TestCertificateAuthority(directory / "foreign", "foreign CA")
    started: dict[str, BrokerProcess] = {}
    try:
        for name, authority in (("tls-1", ca), ("tls-2", ca), ("tls-0", foreign)):
            pair = authority.issue(name, name, node=True)
            yaml = _node_yaml(redis_server.url, pair.cert_file, pair.key_file, ca.ca_file)
            started[name] = BrokerProcess(yaml, env={"XMQ_NODE_ID": name})
        client = redis_server.client()
        pattern = f"{ClusterKeys(CLUSTER).prefix}node:lease:*"
        wait_for(lambda: len(list(client.scan_iter(pattern))) == 3, 10, "leases")
        client.close()
        time.sleep(1.5)
        yield started
    finally:
        for process in started.values():
            process.stop()


def test_nodes_of_the_cluster_ca_link_over_tls_and_deliver(
    nodes: dict[str, BrokerProcess],
) -> None:
    subscriber = PahoClient(nodes["tls-2"].port, "tls-sub")
    subscriber.connect()
    subscriber.subscribe("tls/ok", qos=1)
    publisher = PahoClient(nodes["tls-1"].port, "tls-pub")
    publisher.connect()
    try:
        routed(nodes["tls-2"].port, nodes["tls-1"].port, "tls/ok", subscriber)
        for n in range(10):
            publisher.publish("tls/ok", f"m{n}".encode(), qos=1)
        assert [m.payload for m in subscriber.expect(10)] == [f"m{n}".encode() for n in range(10)]
    finally:
        subscriber.disconnect()
        publisher.disconnect()
    assert "link up: tls-2" in nodes["tls-1"].log()


def test_a_node_with_a_foreign_certificate_cannot_link(nodes: dict[str, BrokerProcess]) -> None:
    subscriber = PahoClient(nodes["tls-0"].port, "tls-foreign-sub")
    subscriber.connect()
    subscriber.subscribe("tls/foreign", qos=1)
    publisher = PahoClient(nodes["tls-1"].port, "tls-foreign-pub")
    publisher.connect()
    try:
        for _ in range(10):
            publisher.publish("tls/foreign", b"x", qos=1)
            time.sleep(0.2)
        subscriber.expect_none(1.0)
    finally:
        subscriber.disconnect()
        publisher.disconnect()
    for name in ("tls-1", "tls-2"):
        log = nodes[name].log()
        assert "link from 127.0.0.1:" in log and "refused: TLS" in log, log[-2000:]
        assert "certificate" in log
        assert "link up: tls-0" not in log
        assert "link up: tls-" in log  # the good pair did link
    assert "link up:" not in nodes["tls-0"].log()


def _wait_log(process: BrokerProcess, text: str, timeout: float = 10.0) -> None:
    wait_for(lambda: text in process.log(), timeout, f"{text!r} in the log")


def test_sighup_reloads_the_link_certificates_for_new_links(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Rotated in place to another CA's pair: after SIGHUP new links use the new files and the
    link already up stays; a broken file is refused with its name and the contexts kept."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_ca = TestCertificateAuthority(tmp_path / "old", "old CA")
    new_ca = TestCertificateAuthority(tmp_path / "new", "new CA")
    live = tmp_path / "live"  # what the Secret mount holds
    live.mkdir()
    ca_file = live / "ca.crt"
    ca_file.write_bytes(old_ca.ca_file.read_bytes())
    env = {"XMQ_CLUSTER__NAME": "link-tls-reload"}
    started: list[BrokerProcess] = []

    def start(name: str, cert: Path, key: Path, ca: Path) -> BrokerProcess:
        yaml = _node_yaml(redis_server.url, cert, key, ca)
        process = BrokerProcess(yaml, env={**env, "XMQ_NODE_ID": name})
        started.append(process)
        return process

    try:
        pairs = {name: old_ca.issue(name, name, node=True, at=live) for name in ("r-1", "r-2")}
        first, second = (
            start(name, pair.cert_file, pair.key_file, ca_file) for name, pair in pairs.items()
        )
        _wait_log(first, "link up: r-2")
        subscriber = PahoClient(second.port, "reload-sub")
        subscriber.connect()
        subscriber.subscribe("reload/t", qos=1)
        routed(second.port, first.port, "reload/t", subscriber)

        for name in ("r-1", "r-2"):
            new_ca.issue(name, name, node=True, at=live)
        ca_file.write_bytes(new_ca.ca_file.read_bytes())
        for process in (first, second):
            process.proc.send_signal(signal.SIGHUP)
            _wait_log(process, "link TLS certificates reloaded")
        third_pair = new_ca.issue("r-3", "r-3", node=True)
        third = start("r-3", third_pair.cert_file, third_pair.key_file, new_ca.ca_file)
        _wait_log(first, "link up: r-3")
        _wait_log(second, "link up: r-3")
        publisher = PahoClient(first.port, "reload-pub")
        publisher.connect()
        publisher.publish("reload/t", b"after", qos=1)
        assert [m.payload for m in subscriber.expect(1)] == [b"after"]
        publisher.disconnect()
        subscriber.disconnect()
        assert first.log().count("link up: r-2") == 1  # the old link kept going

        cert_file = live / "r-1.crt"
        cert_file.write_text("garbage, not a certificate\n")
        first.proc.send_signal(signal.SIGHUP)
        _wait_log(first, "link TLS certificates not reloaded (old ones kept)")
        assert f"cluster.link_tls.cert_file: cannot load the certificates from {cert_file}" in (
            first.log()
        )
        fourth_pair = new_ca.issue("r-4", "r-4", node=True)
        start("r-4", fourth_pair.cert_file, fourth_pair.key_file, new_ca.ca_file)
        _wait_log(first, "link up: r-4")  # r-1 dials r-4 with the contexts it kept
        assert "link up: r-1" in third.log()
    finally:
        for process in started:
            process.stop()

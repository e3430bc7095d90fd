"""``workers: 2``: one ``xmq serve`` supervising two node processes on one shared MQTT port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster_nodes import wait_for
from tests.support.http_probe import http, metric
from tests.support.paho_client import PahoClient
from tests.support.redis_server import RedisServer
from tests.support.worker_supervisor import WorkerLine, WorkerSupervisor, process_alive
from xmq.contract import ClusterKeys

CLIENTS = 12
"""Subscribers per check: all on one worker by chance with probability 2 * 0.5**12."""


def _yaml(redis_url: str, cluster: str) -> str:
    return (
        "node_id: wk-0\n"
        "workers: 2\n"
        "listeners: [{name: mqtt, host: 127.0.0.1, port: 0}]\n"
        "cluster:\n"
        f"  redis_url: {redis_url}\n"
        f"  name: {cluster}\n"
        "  lease_ttl_s: 2\n"
        "  link_port: 0\n"
        "metrics: {host: 127.0.0.1, port: 0}\n"
        "shutdown: {grace_s: 2}\n"
    )


def _members(redis_server: RedisServer, cluster: str) -> set[str]:
    client = redis_server.client()
    try:
        keys = ClusterKeys(cluster)
        names = [
            node.decode() if isinstance(node, bytes) else node
            for node in client.smembers(keys.members())
        ]
        return {name for name in names if client.exists(keys.lease(name))}
    finally:
        client.close()


@pytest.fixture(scope="module")
def workers(redis_server: RedisServer) -> Iterator[tuple[WorkerSupervisor, str]]:
    cluster = "workers"
    supervisor = WorkerSupervisor(_yaml(redis_server.url, cluster))
    try:
        supervisor.wait_started(2)
        wait_for(lambda: _members(redis_server, cluster) == {"wk-0", "wk-1"}, 10, "leases")
        yield supervisor, cluster
    finally:
        supervisor.stop()


def _connections(worker: WorkerLine) -> float:
    return metric(worker.metrics_port, "xmq_listener_connections", 'listener="mqtt"')


def _check_cross_worker_delivery(supervisor: WorkerSupervisor, topic: str) -> None:
    """Subscribers spread over both workers (their metrics say so) all get every message."""
    running = supervisor.current()
    (port,) = {worker.mqtt_port for worker in running.values()}
    before = {index: _connections(worker) for index, worker in running.items()}
    subscribers = [PahoClient(port, f"{topic}-s{i}".replace("/", "-")) for i in range(CLIENTS)]
    publisher = PahoClient(port, "")
    try:
        for subscriber in subscribers:
            subscriber.connect()
            subscriber.subscribe(topic, qos=1)
        added = {index: _connections(w) - before[index] for index, w in running.items()}
        assert sum(added.values()) == CLIENTS
        assert all(count >= 1 for count in added.values()), added
        publisher.connect()
        # Routes reach the other worker over its node link within a moment: probe first.
        deadline = time.monotonic() + 15
        pending = set(range(CLIENTS))
        while pending:
            assert time.monotonic() < deadline, f"subscribers {pending} never reached"
            publisher.publish(topic, b"probe", qos=0)
            time.sleep(0.2)
            for i in list(pending):
                if not subscribers[i].messages.empty():
                    pending.discard(i)
        time.sleep(0.5)
        for subscriber in subscribers:  # forget the probes
            while not subscriber.messages.empty():
                subscriber.messages.get()
        for n in range(20):
            publisher.publish(topic, f"m{n}".encode(), qos=1)
        for subscriber in subscribers:
            got = [message.payload for message in subscriber.expect(20)]
            assert got == [f"m{n}".encode() for n in range(20)]
    finally:
        for client in (*subscribers, publisher):
            client.disconnect()


def test_two_workers_share_the_port_and_deliver_across_each_other(
    workers: tuple[WorkerSupervisor, str],
) -> None:
    supervisor, _cluster = workers
    running = supervisor.current()
    assert {w.node_id for w in running.values()} == {"wk-0", "wk-1"}
    assert running[0].metrics_port != running[1].metrics_port
    assert running[0].link != running[1].link
    _check_cross_worker_delivery(supervisor, "workers/first")


def test_a_killed_worker_is_restarted_and_the_cluster_recovers(
    workers: tuple[WorkerSupervisor, str], redis_server: RedisServer
) -> None:
    supervisor, cluster = workers
    victim = supervisor.current()[1]
    seen = len(supervisor.started)
    subprocess.run(["kill", "-9", str(victim.pid)], check=True)
    restarted = supervisor.wait_started(seen + 1)[1]
    assert restarted.pid != victim.pid
    assert restarted.node_id == "wk-1"
    assert f"worker 1 (pid {victim.pid}) died unexpectedly" in supervisor.log()
    client = redis_server.client()
    try:
        assert int(client.get(ClusterKeys(cluster).node_epoch("wk-1")) or 0) >= 2
    finally:
        client.close()
    wait_for(lambda: _members(redis_server, cluster) == {"wk-0", "wk-1"}, 10, "leases")
    _check_cross_worker_delivery(supervisor, "workers/after-kill")


def test_sighup_reaches_every_worker(workers: tuple[WorkerSupervisor, str]) -> None:
    supervisor, _cluster = workers
    before = supervisor.log().count("SIGHUP: log level")
    supervisor.signal(signal.SIGHUP)
    wait_for(lambda: supervisor.log().count("SIGHUP: log level") == before + 2, 10, "reloads")


def test_sigterm_stops_every_worker_cleanly(redis_server: RedisServer) -> None:
    cluster = "workers-term"
    supervisor = WorkerSupervisor(_yaml(redis_server.url, cluster))
    try:
        pids = [worker.pid for worker in supervisor.wait_started(2).values()]
        wait_for(lambda: len(_members(redis_server, cluster)) == 2, 10, "leases")
        supervisor.signal(signal.SIGTERM)
        assert supervisor.proc.wait(20) == 0
        assert not any(process_alive(pid) for pid in pids)
        assert _members(redis_server, cluster) == set()  # each worker dropped its lease
        assert supervisor.log().count("worker 0 exited (0)") == 1
        assert supervisor.log().count("worker 1 exited (0)") == 1
    finally:
        supervisor.stop()


def test_workers_die_with_a_killed_supervisor(redis_server: RedisServer) -> None:
    supervisor = WorkerSupervisor(_yaml(redis_server.url, "workers-orphan"))
    try:
        pids = [worker.pid for worker in supervisor.wait_started(2).values()]
        supervisor.proc.kill()
        supervisor.proc.wait(10)
        wait_for(lambda: not any(process_alive(pid) for pid in pids), 15, "orphaned workers")
    finally:
        supervisor.stop()


def test_workers_without_redis_are_a_config_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xmq", "serve", "--port", "0"],
        env={"XMQ_WORKERS": "2", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "workers: Value error, workers=2 needs the cluster" in result.stderr
    assert "cluster.redis_url" in result.stderr


def _probe(supervisor: WorkerSupervisor, path: str) -> tuple[int, str]:
    return http(supervisor.health_port, path)


def test_the_pod_probes_answer_for_every_worker(redis_server: RedisServer) -> None:
    """The supervisor's port (the pod's probes) asks each worker: a stopped worker fails both
    probes by name; a killed one keeps the pod live (being restarted) but not ready."""
    cluster = "workers-probes"
    yaml = _yaml(redis_server.url, cluster).replace("lease_ttl_s: 2", "lease_ttl_s: 10")
    supervisor = WorkerSupervisor(yaml)
    try:
        running = supervisor.wait_started(2)
        assert supervisor.health_port not in {w.metrics_port for w in running.values()}
        wait_for(lambda: _probe(supervisor, "/readyz")[0] == 200, 20, "pod ready")
        ready = json.loads(_probe(supervisor, "/readyz")[1])
        assert ready["checks"] == {"supervisor": "ok", "worker 0": "ok", "worker 1": "ok"}
        status, body = _probe(supervisor, "/healthz")
        assert status == 200 and body.startswith("ok workers=2"), body
        assert 'xmq_worker_up{worker="1"} 1.0' in _probe(supervisor, "/metrics")[1]

        stopped = running[1].pid
        os.kill(stopped, signal.SIGSTOP)
        try:
            status, body = _probe(supervisor, "/readyz")
            assert status == 503, body
            checks = json.loads(body)["checks"]
            assert checks["worker 0"] == "ok"
            assert checks["worker 1"] == f"pid {stopped}: /readyz: no answer within 1.5s"
            status, body = _probe(supervisor, "/healthz")
            assert status == 503
            assert body == f"worker 1 (pid {stopped}): /healthz: no answer within 1.5s\n"
        finally:
            os.kill(stopped, signal.SIGCONT)
        wait_for(lambda: _probe(supervisor, "/readyz")[0] == 200, 20, "ready again")

        seen = len(supervisor.started)
        os.kill(stopped, signal.SIGKILL)
        not_ready: list[str] = []
        deadline = time.monotonic() + 30
        while len(supervisor.started) == seen or _probe(supervisor, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, supervisor.log()[-3000:]
            status, body = _probe(supervisor, "/healthz")
            assert status == 200, body  # restarting within its backoff: alive
            status, body = _probe(supervisor, "/readyz")
            if status == 503:
                not_ready.append(json.loads(body)["checks"]["worker 1"])
        assert not_ready, "the restart was never seen as not ready"
        assert all(reason != "ok" for reason in not_ready)
        assert supervisor.current()[1].pid != stopped
        assert 'xmq_worker_restarts_total{worker="1"} 1.0' in _probe(supervisor, "/metrics")[1]

        status, body = http(supervisor.health_port, "/admin/drain", method="POST")
        assert status == 202, body  # sent on to every worker
        assert "worker 0: draining:" in body and "worker 1: draining:" in body
        checks = json.loads(_probe(supervisor, "/readyz")[1])["checks"]
        assert checks["worker 0"].endswith("; draining: draining"), checks
    finally:
        supervisor.stop()


def test_drain_through_the_supervisor_needs_the_admin_token(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With ``metrics.admin_token_file`` the supervisor refuses a drain without the token and
    presents the token itself to every worker, whose own endpoints refuse it without one."""
    token_file = tmp_path / "admin-token"
    token_file.write_text("workers-admin-token-0123456789\n")
    yaml = _yaml(redis_server.url, "workers-admin").replace(
        "metrics: {host: 127.0.0.1, port: 0}",
        f"metrics: {{host: 127.0.0.1, port: 0, admin_token_file: '{token_file}'}}",
    )
    supervisor = WorkerSupervisor(yaml)
    try:
        running = supervisor.wait_started(2)
        wait_for(lambda: _probe(supervisor, "/readyz")[0] == 200, 20, "pod ready")
        status, body = http(supervisor.health_port, "/admin/drain", method="POST")
        assert status == 401, body
        for worker in running.values():
            assert http(worker.metrics_port, "/admin/drain", method="POST")[0] == 401
        assert _probe(supervisor, "/readyz")[0] == 200  # nobody drained

        url = f"http://127.0.0.1:{supervisor.health_port}"
        result = subprocess.run(
            [sys.executable, "-m", "xmq", "drain", "--url", url, "--token-file", str(token_file)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "worker 0: draining:" in result.stdout and "worker 1: draining:" in result.stdout
        checks = json.loads(_probe(supervisor, "/readyz")[1])["checks"]
        assert checks["worker 1"].endswith("; draining: draining"), checks
    finally:
        supervisor.stop()

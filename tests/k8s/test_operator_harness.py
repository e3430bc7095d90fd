"""Shared helpers of the operator and chart tests (no tests here).

Runs the operator in-process with ``kopf.testing.KopfRunner`` against the real control plane,
and seeds a real redis-server the way broker nodes do.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import redis
from kopf.testing import KopfRunner

from xmq.contract import ClusterKeys, NodeLease

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll ``check`` until it returns a truthy value; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@contextmanager
def running_operator(kubeconfig: Path, namespaces: tuple[str, ...] = ()) -> Iterator[KopfRunner]:
    """The operator (``xmq_operator.handlers``) running in this process until the block ends."""
    port = free_port()
    scope = [f"--namespace={ns}" for ns in namespaces] or ["--all-namespaces"]
    args = [
        "run",
        "--standalone",
        *scope,
        f"--liveness=http://127.0.0.1:{port}/healthz",
        "-m",
        "xmq_operator.handlers",
    ]
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    try:
        with KopfRunner(args, timeout=60) as runner:

            def alive() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                        return bool(r.status == 200)
                except OSError:
                    return False

            wait_for(alive, 60, "the operator's liveness endpoint")
            yield runner
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous


class OperatorProcess:
    """The ``xmq-operator`` console script as a real process (its log in ``log_path``)."""

    def __init__(self, kubeconfig: Path, log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log = log_path.open("w")
        script = Path(sys.executable).with_name("xmq-operator")
        self.proc = subprocess.Popen(
            [str(script), f"--liveness=http://127.0.0.1:{self.port}/healthz", *args],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of ``path`` on the operator's endpoint; (0, "") when unreachable."""
        if self.proc.poll() is not None:
            raise AssertionError(f"operator exited:\n{self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code, ""
        except OSError:
            return 0, ""

    def metric(self, sample: str) -> float | None:
        """The value of the exposition line starting with ``sample`` (name and labels)."""
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()


def secret_manifest(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def cluster_manifest(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {
        "redis": {"secretRef": {"name": "redis", "key": "url"}},
        "updateStrategy": {"minReadySeconds": 1, "drainTimeoutSeconds": 5},
    }
    body_spec.update(spec)
    return {
        "apiVersion": "xmq.io/v1alpha1",
        "kind": "XmqCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body_spec,
    }


def seed_node(
    client: redis.Redis,
    keys: ClusterKeys,
    pod: dict[str, Any],
    worker: int,
    sessions: list[str],
) -> NodeLease:
    """Register a node of ``pod`` the way a starting broker does (epoch, lease, member)."""
    pod_name = pod["metadata"]["name"]
    node_id = f"{pod_name}-{worker}"
    epoch = int(client.incr(keys.node_epoch(node_id)))
    lease = NodeLease(
        node_id=node_id,
        pod_name=pod_name,
        pod_uid=pod["metadata"]["uid"],
        address=f"10.0.0.{worker}:7884",
        epoch=epoch,
        started_at=time.time(),
    )
    client.set(keys.lease(node_id), lease.to_json(), px=600_000)
    client.sadd(keys.members(), node_id)
    if sessions:
        client.sadd(keys.node_sessions(node_id), *sessions)
    return lease


def condition(body: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in body.get("status", {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None

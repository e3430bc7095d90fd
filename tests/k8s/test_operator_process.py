"""The ``xmq-operator`` console script as a real process: liveness endpoint, clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from scripts.k8s.cluster import ControlPlane
from tests.k8s.test_operator_harness import free_port, wait_for

CRD = Path(__file__).resolve().parents[2] / "crds" / "xmqcluster.yaml"


def test_the_console_script_serves_liveness_and_stops_on_sigterm(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    k8s_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD)
    port = free_port()
    script = Path(sys.executable).with_name("xmq-operator")
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [str(script), f"--liveness=http://127.0.0.1:{port}/healthz"],
        env={**os.environ, "KUBECONFIG": str(k8s_cluster.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError((tmp_path / "operator.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(healthy, 60, "xmq-operator's liveness endpoint")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()

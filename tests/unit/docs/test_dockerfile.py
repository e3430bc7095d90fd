"""The Dockerfile's EXPOSE names the ports of the pod contract (what the operator's pods use)."""

from __future__ import annotations

import re
from pathlib import Path

from xmq.contract import pod as pod_contract

DOCKERFILE = Path(__file__).resolve().parents[3] / "Dockerfile"


def test_exposed_ports_are_the_pod_contracts() -> None:
    (line,) = re.findall(r"^EXPOSE (.+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert {int(port) for port in line.split()} == {
        pod_contract.MQTT_PORT,
        pod_contract.MQTT_TLS_PORT,
        pod_contract.CLUSTER_LINK_PORT,
        pod_contract.HEALTH_PORT,
    }

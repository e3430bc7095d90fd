"""The fake Nodes of the test control plane: kwok keeps them Ready and runs their pods.

Labelled like an EKS node group (instance type, zone, node group, capacity type), so that the
operator's scheduling rules meet what they would on EKS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Label that makes kwok manage a Node (``--manage-nodes-with-label-selector``).
KWOK_LABEL = ("type", "kwok")
#: Value of the ``type`` label on a Node whose heartbeat was stopped (see ``stop_heartbeat``).
KWOK_PAUSED = "kwok-paused"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
NODEGROUP = "eks.amazonaws.com/nodegroup"
ZONE = "topology.kubernetes.io/zone"
REGION = "us-east-1"


@dataclass(frozen=True)
class FakeNode:
    """A Node that kwok keeps Ready (status, heartbeat lease) and whose pods it runs."""

    name: str
    instance_type: str
    zone: str
    nodegroup: str
    cpu: str
    memory: str
    pods: int = 110
    labels: tuple[tuple[str, str], ...] = ()

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": self.instance_type,
            "beta.kubernetes.io/instance-type": self.instance_type,
            "topology.kubernetes.io/region": REGION,
            "topology.kubernetes.io/zone": self.zone,
            "eks.amazonaws.com/nodegroup": self.nodegroup,
            "eks.amazonaws.com/capacityType": "ON_DEMAND",
            KWOK_LABEL[0]: KWOK_LABEL[1],
            **dict(self.labels),
        }
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "spec": {"providerID": f"kwok://{REGION}/{self.name}"},
            "status": {"allocatable": resources, "capacity": resources},
        }


def c5n_node(name: str, zone: str, **kw: Any) -> FakeNode:
    """A node of the EKS ``xmq-c5n`` node group (c5n.2xlarge: 8 vCPU, 21 GiB)."""
    return FakeNode(name, "c5n.2xlarge", zone, "xmq-c5n", "8", "21Gi", **kw)


def m5_node(name: str, zone: str, **kw: Any) -> FakeNode:
    """A node of a general-purpose node group (m5.large: 2 vCPU, 8 GiB)."""
    return FakeNode(name, "m5.large", zone, "general-m5", "2", "8Gi", **kw)


#: Five c5n nodes per zone (us-east-1a/b), so that four brokers fit one per node in a single
#: zone with one spare, plus two m5.large nodes that brokers must never land on.
DEFAULT_NODES: tuple[FakeNode, ...] = (
    *(c5n_node(f"c5n-{z}{i}", f"{REGION}{z}") for z in "ab" for i in range(1, 6)),
    m5_node("m5-a1", f"{REGION}a"),
    m5_node("m5-b1", f"{REGION}b"),
)

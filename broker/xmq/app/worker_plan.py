"""What each of the ``workers`` node processes of one ``xmq serve`` is (pure decisions).

Worker ``i`` of a supervisor whose config says ``node_id: <pod>-<n>`` is the cluster node
``<pod>-<n+i>``; its node link listens on ``cluster.link_port + i`` and its HTTP endpoint
(metrics, probes, admin) on ``metrics.port + i`` (a port of 0 stays 0: any free port each).
The MQTT listeners are shared: every worker binds the same ports with ``SO_REUSEPORT`` and
the kernel spreads new connections over them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from xmq.config import BrokerConfig
from xmq.contract.keys import node_id_for, split_node_id

WORKER_INDEX_ENV = "XMQ_WORKER_INDEX"
"""Set by the supervisor in each worker's environment: the worker's index (0..N-1)."""
SUPERVISOR_PID_ENV = "XMQ_SUPERVISOR_PID"
"""Set by the supervisor: its pid; a worker whose parent is gone stops."""

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def cpu_count() -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (container)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    count = count or 1
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return count


def worker_count(config: BrokerConfig) -> int:
    """``workers`` resolved: 0 means one per CPU."""
    return config.workers or cpu_count()


def worker_index() -> int | None:
    """This process's worker index when a supervisor started it, else None."""
    value = os.environ.get(WORKER_INDEX_ENV)
    return int(value) if value else None


def _offset(port: int, index: int) -> int:
    return port + index if port else 0


def worker_node_id(node_id: str, index: int) -> str:
    """Node id of worker ``index``: ``<pod>-<n+index>`` for a configured ``<pod>-<n>``."""
    pod_name, first = split_node_id(node_id)
    return node_id_for(pod_name, first + index)


def worker_config(config: BrokerConfig, index: int) -> BrokerConfig:
    """The configuration of worker ``index``: its node id, link port and HTTP port."""
    cluster = config.cluster.model_copy(
        update={"link_port": _offset(config.cluster.link_port, index)}
    )
    metrics = config.metrics.model_copy(update={"port": _offset(config.metrics.port, index)})
    return config.model_copy(
        update={
            "node_id": worker_node_id(config.node_id, index),
            "cluster": cluster,
            "metrics": metrics,
        }
    )


def admin_ports(config: BrokerConfig) -> list[int]:
    """The HTTP ports of every node process of this config (one per worker)."""
    return [_offset(config.metrics.port, index) for index in range(worker_count(config))]

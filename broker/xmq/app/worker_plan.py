"""What each of the ``workers`` node processes of one ``xmq serve`` is (pure decisions).

Worker ``i`` of a supervisor whose config says ``node_id: <pod>-<n>`` is the cluster node
``<pod>-<n+i>``; its node link listens on ``cluster.link_port + i`` (0 stays 0: any free port)
and its HTTP endpoint (metrics, probes, admin) on ``metrics.port + 1 + i``: ``metrics.port``
itself is the supervisor's, whose probes answer for every worker (with port 0 the supervisor
picks a free port for each worker and passes it in ``XMQ_WORKER_HTTP_PORT``).
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
WORKER_HTTP_PORT_ENV = "XMQ_WORKER_HTTP_PORT"
"""Set by the supervisor: the port of the worker's HTTP endpoint (the supervisor probes it)."""

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


def worker_http_port(config: BrokerConfig, index: int) -> int:
    """Worker ``index``'s HTTP port: ``metrics.port + 1 + index`` (0 stays 0)."""
    return _offset(config.metrics.port, 1 + index)


def worker_config(config: BrokerConfig, index: int) -> BrokerConfig:
    """The configuration of worker ``index``: its node id, link port and HTTP port (the one
    its supervisor chose, ``XMQ_WORKER_HTTP_PORT``, else ``worker_http_port``)."""
    cluster = config.cluster.model_copy(
        update={"link_port": _offset(config.cluster.link_port, index)}
    )
    chosen = os.environ.get(WORKER_HTTP_PORT_ENV)
    port = int(chosen) if chosen else worker_http_port(config, index)
    metrics = config.metrics.model_copy(update={"port": port})
    return config.model_copy(
        update={
            "node_id": worker_node_id(config.node_id, index),
            "cluster": cluster,
            "metrics": metrics,
        }
    )


def admin_ports(config: BrokerConfig) -> list[int]:
    """The HTTP ports of every node process of this config: the one node's ``metrics.port``,
    or each worker's (not the supervisor's)."""
    count = worker_count(config)
    if count == 1:
        return [config.metrics.port]
    return [worker_http_port(config, index) for index in range(count)]

"""The Redis contract shared by the brokers and the operator.

Pure: key names (:mod:`xmq.contract.keys`), record models (:mod:`xmq.contract.records`), Lua
script texts (:mod:`xmq.contract.scripts`) and the pod conventions the operator and the broker
agree on (:mod:`xmq.contract.pod`). No I/O here: callers bring their own Redis client.
Documented key by key in ``docs/cluster.md``.
"""

from __future__ import annotations

from xmq.contract.keys import (
    CONTRACT_VERSION,
    ClusterKeys,
    InvalidNameError,
    node_id_for,
    split_node_id,
    validate_cluster_name,
)
from xmq.contract.records import (
    DEFAULT_LEASE_TTL_SECONDS,
    NodeLease,
    RetainedMessage,
    SessionOwner,
    SessionState,
)
from xmq.contract.scripts import (
    RELEASE_DEAD_NODE,
    CleanupOutcome,
    CleanupResult,
    ScriptCall,
    release_dead_node,
)

__all__ = [
    "CONTRACT_VERSION",
    "DEFAULT_LEASE_TTL_SECONDS",
    "RELEASE_DEAD_NODE",
    "CleanupOutcome",
    "CleanupResult",
    "ClusterKeys",
    "InvalidNameError",
    "NodeLease",
    "RetainedMessage",
    "ScriptCall",
    "SessionOwner",
    "SessionState",
    "node_id_for",
    "release_dead_node",
    "split_node_id",
    "validate_cluster_name",
]

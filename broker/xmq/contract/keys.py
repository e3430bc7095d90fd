"""Redis key names of an XMQ cluster: the one place they are built.

Every key of a cluster starts with ``xmq:v1:{<cluster>}:``. The braces make the cluster name a
Redis Cluster hash tag, so all keys of one XMQ cluster live in one slot and the Lua scripts of
:mod:`xmq.contract.scripts` may touch several of them atomically. ``v1`` is the contract
version: an incompatible change of any key or record below bumps it.

Key kinds come before the variable part (``session:owner:<client id>``), so a client id or
topic containing ``:`` can never make two different keys collide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CONTRACT_VERSION = "v1"
"""Version segment of every key; bumped on an incompatible change of the contract."""

_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$")
_NODE_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,250}[A-Za-z0-9])?-[0-9]{1,4}$")


class InvalidNameError(ValueError):
    """A cluster name, node id or client id that cannot be part of a key."""


def validate_cluster_name(name: str) -> str:
    """Return ``name`` when it is a valid cluster name (letters, digits, ``.``, ``_``, ``-``)."""
    if not _CLUSTER_NAME.match(name):
        raise InvalidNameError(
            f"invalid cluster name {name!r}: 1-128 letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return name


def node_id_for(pod_name: str, worker: int) -> str:
    """The id of worker ``worker`` of pod ``pod_name``: ``<pod>-<worker>``."""
    if worker < 0 or worker > 9999:
        raise InvalidNameError(f"worker index out of range: {worker}")
    node_id = f"{pod_name}-{worker}"
    if not _NODE_ID.match(node_id):
        raise InvalidNameError(f"invalid pod name for a node id: {pod_name!r}")
    return node_id


def split_node_id(node_id: str) -> tuple[str, int]:
    """Split ``<pod>-<worker>`` into the pod name and the worker index."""
    if not _NODE_ID.match(node_id):
        raise InvalidNameError(f"invalid node id {node_id!r}: expected '<pod>-<worker>'")
    pod_name, _, worker = node_id.rpartition("-")
    return pod_name, int(worker)


def _check_part(kind: str, value: str) -> str:
    if not value:
        raise InvalidNameError(f"empty {kind}")
    return value


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """Builds every Redis key of one XMQ cluster.

    >>> ClusterKeys("prod").lease("xmq-0-1")
    'xmq:v1:{prod}:node:lease:xmq-0-1'
    """

    cluster: str
    prefix: str = field(init=False, repr=False, compare=False)
    """``xmq:v1:{<cluster>}:``, the start of every key of the cluster (made once: every key
    of a durable record's write and acknowledgement starts with it)."""

    def __post_init__(self) -> None:
        validate_cluster_name(self.cluster)
        object.__setattr__(self, "prefix", f"xmq:{CONTRACT_VERSION}:{{{self.cluster}}}:")

    # -- membership ------------------------------------------------------------------------

    def node_epoch(self, node_id: str) -> str:
        """String counter; ``INCR`` at each start of the node gives its run epoch."""
        return f"{self.prefix}node:epoch:{_check_part('node id', node_id)}"

    def lease(self, node_id: str) -> str:
        """String holding a :class:`~xmq.contract.records.NodeLease` as JSON, with a TTL."""
        return f"{self.prefix}node:lease:{_check_part('node id', node_id)}"

    def lease_pattern(self) -> str:
        """``SCAN MATCH`` pattern of every lease key of the cluster."""
        return f"{self.prefix}node:lease:*"

    def cluster_uid(self) -> str:
        """String: the UID of the XmqCluster owning this key namespace (``SET NX`` by its
        operator, or by a broker started with ``XMQ_CLUSTER_UID``); another UID refuses."""
        return f"{self.prefix}cluster:uid"

    def members(self) -> str:
        """Set of node ids that may hold a lease (a lease key decides whether one is alive)."""
        return f"{self.prefix}members"

    def node_sessions(self, node_id: str) -> str:
        """Set of client ids whose persistent session the node owns."""
        return f"{self.prefix}node:sessions:{_check_part('node id', node_id)}"

    # -- sessions --------------------------------------------------------------------------

    def session_owner(self, client_id: str) -> str:
        """String holding a :class:`~xmq.contract.records.SessionOwner` as JSON."""
        return f"{self.prefix}session:owner:{client_id}"

    def orphaned_sessions(self) -> str:
        """Set of client ids whose owner node was found dead (by the operator or a broker)."""
        return f"{self.prefix}sessions:orphaned"

    def session_state(self, client_id: str) -> str:
        """Hash of a persistent session's state (:class:`~xmq.contract.records.SessionState`)."""
        return f"{self.prefix}session:state:{client_id}"

    def session_subscriptions(self, client_id: str) -> str:
        """Hash topic filter -> subscription options (JSON) of a persistent session."""
        return f"{self.prefix}session:subs:{client_id}"

    def session_queue(self, client_id: str) -> str:
        """List of encoded messages queued for a persistent session (``RPUSH`` / ``LPOP``)."""
        return f"{self.prefix}session:queue:{client_id}"

    def session_inflight(self, client_id: str) -> str:
        """Hash packet id -> encoded outbound QoS 1/2 message in flight to the client."""
        return f"{self.prefix}session:inflight:{client_id}"

    def session_qos2_inbound(self, client_id: str) -> str:
        """Set of inbound QoS 2 packet ids received but not yet released (PUBREL)."""
        return f"{self.prefix}session:qos2in:{client_id}"

    def session_qos2_generations(self, client_id: str) -> str:
        """Hash: inbound QoS 2 packet id -> how many times the session released it (PUBREL);
        with the session's ``incarnation`` it makes the id of the message a PUBLISH with that
        packet id carries (``core.inbound_ids``), the same on every node."""
        return f"{self.prefix}session:qos2gen:{client_id}"

    def session_seen(self, client_id: str, record_id: str) -> str:
        """String with a TTL: the message ``record_id`` (a forward id ``<node>/<epoch>/f<n>`` or an
        inbound QoS 2 message id ``<incarnation>/q<packet id>.<generation>``, no ``:``) was
        queued for the session (records and ``APPEND_IF_OWNER`` skip it from then on). Its
        value names the run that wrote it (``<lease key>@<epoch>``; ``1`` from an append)."""
        return f"{self.prefix}session:seen:{_check_part('record id', record_id)}:{client_id}"

    def inbound_marks(self, message_id: str) -> str:
        """Set of marker keys: the ``session:seen`` / ``shared:seen`` markers written for the
        inbound QoS 2 message ``message_id`` (``<incarnation>/q<packet id>.<generation>``: it
        names its publisher's session) while its exchange is open. The markers live until
        ``RELEASE_INBOUND_ID`` (or the session's release, or a clean start) shortens them to a
        grace and deletes this set (``INBOUND_MARK_TTL_MS`` a ceiling for both)."""
        return f"{self.prefix}session:qos2marks:{_check_part('message id', message_id)}"

    def shared_seen(self, message_id: str, group: str, topic_filter: str) -> str:
        """String with a TTL: the shared group ``$share/<group>/<topic_filter>`` has the inbound
        QoS 2 message ``message_id`` (``<incarnation>/q<packet id>.<generation>``, no ``:``):
        a member's record of it was pushed, or a member's delivery of it claimed the group
        (``core.shared_claims``); a later routing of the same message (a re-sent PUBLISH) gives
        the group no second copy. A group name has no ``/``: the key is unambiguous. Its value
        names the run that wrote it (``<lease key>@<epoch>``, then ``>`` and the member's
        client id for a claim)."""
        return (
            f"{self.prefix}shared:seen:{_check_part('message id', message_id)}:"
            f"{_check_part('group', group)}/{topic_filter}"
        )

    # -- retained messages -----------------------------------------------------------------

    def retained(self, topic: str) -> str:
        """String: a :class:`~xmq.contract.records.RetainedMessage` (or tombstone) as JSON."""
        return f"{self.prefix}retained:msg:{_check_part('topic', topic)}"

    def retained_index(self) -> str:
        """Sorted set topic -> revision of the last change (tombstones included)."""
        return f"{self.prefix}retained:index"

    def retained_revision(self) -> str:
        """String counter; ``INCR`` gives the revision of each retained-message change."""
        return f"{self.prefix}retained:rev"

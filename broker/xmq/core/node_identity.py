"""This node's identity (``NodeIdentity``): compiled with its per-message reader, the node-link
hub's forward id (``cluster.cluster_hub``: the id's ``<node>/<epoch>`` prefix is checked against
it for every message sent over a link), so each read is a native attribute access, not a
generic ``getattr`` on an interpreted object. Re-exported by ``core.cluster_ports``, its port;
set by membership (interpreted: it writes through the compiled class's attributes)."""

from __future__ import annotations


class NodeIdentity:
    """This node's id, its run epoch and whether it holds a valid lease (set by membership)."""

    __slots__ = ("connect_wait_s", "epoch", "lease_ttl_s", "node_id", "online", "rejoining")

    def __init__(
        self,
        node_id: str,
        epoch: int = 0,
        online: bool = False,
        lease_ttl_s: float = 10.0,
        connect_wait_s: float = 5.0,
    ) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.online = online
        self.lease_ttl_s = lease_ttl_s
        self.connect_wait_s = connect_wait_s  # a CONNECT waits this long for an unreachable owner
        # Back online under a new epoch, its previous run's sessions not yet loaded as orphans:
        # a CONNECT now would let a publish find no route for them (0x10), so it gets 0x88.
        self.rejoining = False

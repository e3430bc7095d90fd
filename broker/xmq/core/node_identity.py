"""This node's identity (``NodeIdentity``): compiled with its per-message reader, the node-link
hub's forward id (``cluster.cluster_hub``: the id's ``<node>/<epoch>`` prefix is checked against
it for every message sent over a link), so each read is a native attribute access, not a
generic ``getattr`` on an interpreted object. Re-exported by ``core.cluster_ports``, its port;
set by membership (interpreted: it writes through the compiled class's attributes). With it
``RunIds``, the ids a node numbers per run (forward ids, the durable store's record ids)."""

from __future__ import annotations

from typing import Final

_DIGITS: Final = tuple(str(n).encode() for n in range(1000))
"""0 to 999 in decimal, as bytes (an id's number below 1,000)."""

_PADDED: Final = tuple(b"%03d" % n for n in range(1000))
"""0 to 999 as three decimal digits (an id's last three, past 999)."""


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


class RunIds:
    """Ids ``<node id>/<epoch>/<tag><n>`` numbered from 1 (and on across runs) by one part of
    this node: the cluster hub's forward ids (tag ``f``), the durable store's own record ids
    (no tag). The ``<node id>/<epoch>/<tag>`` prefix is built once per run of the node
    (``identity`` changes when it rejoins under a new epoch), not per id."""

    __slots__ = (
        "_epoch",
        "_high",
        "_high_raw",
        "_node",
        "_raw_prefix",
        "identity",
        "last",
        "prefix",
        "tag",
    )

    def __init__(self, identity: NodeIdentity, tag: str = "") -> None:
        self.identity = identity
        self.tag = tag
        self.last = 0  # the number of the last id given
        self.prefix = ""  # of the run below
        self._raw_prefix = b""  # ``prefix`` encoded (``next_raw``)
        self._high = -1  # ``next_raw``'s number // 1000 ...
        self._high_raw = b""  # ... and the id up to its last three digits
        self._node = ""
        self._epoch = -1

    def next(self) -> str:
        """A new id, numbered one past ``last``."""
        identity = self.identity
        if identity.epoch != self._epoch or identity.node_id != self._node:
            self._new_run()
        self.last = number = self.last + 1
        return self.prefix + str(number)

    def next_raw(self) -> bytes:
        """``next()``'s id as UTF-8 (a durable record's id field): no id made as a ``str`` to be
        encoded whole, nor its number converted to decimal per id — the run's prefix and the
        number's thousands are encoded once per 1,000 ids, its last three digits come from a
        table."""
        identity = self.identity
        if identity.epoch != self._epoch or identity.node_id != self._node:
            self._new_run()
        self.last = number = self.last + 1
        high = number // 1000
        if high != self._high:  # (once per 1,000 ids)
            self._high = high
            self._high_raw = self._raw_prefix + str(high).encode() if high else self._raw_prefix
        low = number - high * 1000
        return self._high_raw + (_PADDED[low] if high else _DIGITS[low])

    def _new_run(self) -> None:
        """The node's id or epoch changed (or the first id): the prefix of this run's ids."""
        identity = self.identity
        self._node, self._epoch = identity.node_id, identity.epoch
        self.prefix = f"{self._node}/{self._epoch}/{self.tag}"
        self._raw_prefix = self.prefix.encode()
        self._high = -1

    def last_id(self) -> str:
        """The last id given (by ``next``)."""
        return self.prefix + str(self.last)

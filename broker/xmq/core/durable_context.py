"""The durable context of one routing step (``DurableContext``): compiled with the modules
that read it per record (``core.session``, ``core.publish_flow``, ``cluster.link_dispatch``,
``store.redis_session_store``), so each read is a native attribute access, not a generic
``getattr`` on an interpreted object. Re-exported by ``core.cluster_ports``, its port."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from xmq.core.cluster_ports import DurableHold


class DurableContext:
    """Why the durable records of one routing step are written, passed with the call that
    routes it (``Broker.publish`` -> ``Session.deliver`` -> ``DurableStore.record``): never
    set on an object for the duration of a call. Immutable (``Final``, checked by mypy) and
    slotted: made once per held PUBLISH or received frame, read once per record.

    ``hold``: the publisher's held PUBACK / PUBREC (``max_queued_writes`` 0): every record
    made with this context holds it until Redis has answered.

    ``forward_id``: set while a message that came over a node link (PUBLISH or DIRECT) is
    delivered here, and while a persistent session's QoS 2 PUBLISH is routed on its node:
    its cluster-wide id (``Message.forward_id``; ``core.inbound_ids``), which a non-shared
    record takes as its record id, with a ``session:seen`` marker written in the same call
    (a session whose marker of it exists does not queue it again). ``''`` for any other
    local publish, and for any other delivery of a forwarded message (a retained one on
    subscribe, a shared one): those records get ids of their own.
    """

    __slots__ = ("forward_id", "hold")

    def __init__(self, hold: DurableHold | None = None, forward_id: str = "") -> None:
        self.hold: Final = hold
        self.forward_id: Final = forward_id

    def __repr__(self) -> str:
        return f"DurableContext(hold={self.hold!r}, forward_id={self.forward_id!r})"


NO_DURABLE_CONTEXT: Final = DurableContext()
"""Nothing waits for the records and the message did not come over a node link."""

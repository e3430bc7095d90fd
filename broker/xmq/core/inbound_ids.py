"""The message id of a persistent session's inbound QoS 2 PUBLISH, the same on every node.

In a cluster with held acknowledgements (``max_queued_writes`` 0) a QoS 2 PUBLISH of a
persistent session is routed under an id *derived* from what its publisher's session is, not
from a counter of the node that reads it: ``<incarnation>/q<packet id>.<generation>``.

* ``incarnation``: random, given to the session when it starts (new, or started clean) by its
  claim (``CLAIM_SESSION`` stores it with the session, a later claim reads it back), so a new
  session of the same client id never reuses an earlier one's ids;
* ``generation``: how many times the session has released that packet id (PUBREL, or its
  PUBLISH refused), kept with the session in Redis (``RELEASE_INBOUND_ID``): a packet id the
  client reuses after PUBCOMP is a new message.

A PUBLISH the client sends again (DUP) — to this node or, after a move, to any other — maps to
the same id, so every durable record of it is idempotent per destination session: the record
script finds the session's ``session:seen`` marker of that id and queues nothing
(``FENCED_WRITES``), a dead owner's append likewise (``APPEND_IF_OWNER``). That makes it safe
to route a re-sent PUBLISH again whose packet id a claim read back from Redis (``restored``):
this node did not route it, and the records of its first routing may have been refused
(fenced) while its id was written; where they were written, routing it again changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable


class InboundMessageIds:
    """The inbound QoS 2 message ids of one persistent session (``Session.inbound_ids``)."""

    __slots__ = ("generations", "incarnation", "restored")

    def __init__(
        self,
        incarnation: str,
        generations: dict[int, int] | None = None,
        restored: Iterable[int] = (),
    ) -> None:
        self.incarnation = incarnation
        self.generations: dict[int, int] = generations if generations is not None else {}
        # packet ids a claim read back (received by another node, or by this node's previous
        # run): a re-sent PUBLISH with one of them is routed once more (see the module doc)
        self.restored: set[int] = set(restored)

    def message_id(self, packet_id: int) -> str:
        """The id of the message the session's PUBLISH with ``packet_id`` carries now."""
        return f"{self.incarnation}/q{packet_id}.{self.generations.get(packet_id, 0)}"

    def route_again(self, packet_id: int) -> bool:
        """A re-sent PUBLISH of a received packet id: True (once) when a claim read the id
        back, so this node has not routed that message itself."""
        restored = self.restored
        if packet_id in restored:
            restored.discard(packet_id)
            return True
        return False

    def released(self, packet_id: int) -> int:
        """The packet id was released: its next message is a new one. Returns the generation
        released (what ``RELEASE_INBOUND_ID`` compares with)."""
        generations = self.generations
        generation = generations.get(packet_id, 0)
        generations[packet_id] = generation + 1
        self.restored.discard(packet_id)
        return generation


def is_derived_id(record_id: str) -> bool:
    """True for a record id that names a message cluster-wide: a forward id
    (``<node>/<epoch>/f<n>``) or an inbound QoS 2 message id (``<incarnation>/q<id>.<gen>``),
    not a node's own record counter (``<node>/<epoch>/<n>``)."""
    last = record_id.rpartition("/")[2]
    return bool(last) and not last.isdigit()

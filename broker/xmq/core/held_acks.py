"""Publishers' PUBACK / PUBREC held until their message's durable records are written.

Only in a cluster with ``persistence.max_queued_writes: 0`` (the app sets ``Broker.acks``):
a QoS 1/2 PUBLISH is routed with a ``HeldAck``, passed to ``Broker.publish`` as
``DurableContext(hold)`` (and so to every ``DurableStore.record`` of the routing) and to the
cluster router. Every record the routing queues takes the hold once (``hold``)
and gives it back when written (``release``): a local persistent subscriber's ``RPUSH``, the
PUBLISH frame to a node with persistent sessions until that node's PUBLISH_ACK, an
``APPEND_IF_OWNER`` for a dead owner's session, a SHARED frame to another node's shared-group
member until that node's PUBLISH_ACK (or, when it dies first, until the member the message is
re-dispatched to has it), a retained message's Redis record. The routing itself holds it too,
so the ack goes out when the last of them is released — at once when nothing durable was
involved. Its reason code is settled then (``outcome``): the routing counts its deliveries, a
node whose PUBLISH_ACK says it delivered a frame nowhere (every delivery dropped for a quota)
takes one back (``undelivered``), so a message dropped everywhere for a quota gets 0x97, as
on one node, and a QoS 2 one's packet id is forgotten with its PUBREC 0x97.

A persistent session's PUBCOMP (inbound QoS 2) is held the same way (``complete``) until Redis
has answered the ``SREM session:qos2in`` of its packet id (``RELEASE_INBOUND_ID``, which also
moves the id's generation on: ``core.inbound_ids``): a client that has its PUBCOMP may
reuse the id at once, and a node resuming the session after a kill -9 must not hold it still
(it would take the new message for a re-send of the old one). A PUBREL re-sent meanwhile (after
a reconnect) gets that PUBCOMP when the id is removed, as a re-sent PUBLISH gets its PUBREC.

A record that finally cannot be written (the store gave up retrying) fails the hold: no
success is ever acknowledged for it. The ack then carries 0x80 (Unspecified error) to an MQTT 5
client; a 3.1.1 client, whose PUBACK / PUBREC has no reason code, gets no ack: its connection is
closed and it sends the PUBLISH again. A failed PUBREC's packet id is forgotten (the client
may reuse it, or re-sends the message as new); a failed PUBCOMP (its id's removal was not
written) closes the connection too (PUBCOMP has no error code for it).

No task or future per message: a held ack is one slotted object with a counter; the links
release theirs in batches, per PUBLISH_ACK. Held acks count against the client's in-flight
window: a client with the server's Receive Maximum of them is not read until one is released
(a conforming MQTT 5 client never gets there; a 3.1.1 client has no such limit of its own).
A PUBACK is counted from the first record that holds it (or a fan-out over later loop turns:
``waits``), before the publisher's next packet is read: one that nothing durable holds goes
out when its routing is over, within the same call, and is never counted (no per-connection
bookkeeping for it). A PUBREC or PUBCOMP is counted from the start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr  # a runtime dependency (pyproject): a no-op when pure

from xmq.codec.packets import MQTT_5
from xmq.codec.reason_codes import ReasonCode
from xmq.codec.writer import puback_bytes, pubcomp_bytes, pubrec_bytes

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

_PUBACK: Final = 0x40
_PUBREC: Final = 0x50
_PUBCOMP: Final = 0x70
UNSPECIFIED_ERROR: Final = 0x80


@mypyc_attr(free_list_len=1)
class HeldAck:
    """The acknowledgement of one QoS 1/2 PUBLISH (or a PUBREL), sent once ``pending`` drops
    to 0.

    Compiled, the last one freed is kept for the next one made (``free_list_len=1``, as
    ``Delivery`` and ``Message``): a durable message's held PUBACK is freed once sent and the
    next message's is made from it, without the allocator's ``malloc`` and ``free``."""

    __slots__ = (
        "client_id",
        "conn",
        "counted",
        "delivered",
        "gate",
        "kind",
        "packet_id",
        "pending",
        "quota",
        "reason",
    )

    def __init__(
        self,
        gate: AckGate,
        conn: ClientConnection,
        client_id: str,
        kind: int,
        packet_id: int,
        counted: bool = True,
    ) -> None:
        self.gate = gate
        self.conn = conn
        self.client_id = client_id
        self.kind = kind  # the packet type byte: PUBACK, PUBREC or PUBCOMP
        self.packet_id = packet_id
        self.reason = 0  # UNSPECIFIED_ERROR once a record failed
        self.pending = 1  # the routing's own: released when routing is over
        self.delivered = 1  # deliveries the routing counted (set when it is over)
        self.quota = False  # a delivery was dropped for a quota (here or on another node)
        # counted against the connection's in-flight window (a PUBACK: once a record or a
        # fan-out makes it outlive its routing, ``waits``)
        self.counted = counted

    def hold(self) -> None:
        """One more durable record to wait for."""
        self.pending += 1
        if not self.counted:
            self.waits()

    def waits(self) -> None:
        """The ack outlives its routing (a record holds it, or a fan-out over later loop
        turns): it counts against the connection's in-flight window from now."""
        if not self.counted:
            self.counted = True
            self.gate.count(self.conn)

    def release(self) -> None:
        """One record is written (or needs no waiting any more)."""
        pending = self.pending - 1
        self.pending = pending
        if pending == 0:
            self.gate.done(self)

    def routed(self, delivered: int, quota: bool) -> None:
        """Routing is over: ``delivered``, the deliveries it counted (other nodes' PUBLISH_ACKs
        may still take some back: ``undelivered``); ``quota``, whether one was dropped for a
        quota here. The routing's own hold is released: the ack goes now unless records are
        still unwritten (its reason is ``outcome()``)."""
        self.delivered = delivered
        self.quota = quota
        self.release()

    def fail(self) -> None:
        """One record could not be written: the ack goes out as an error (``release``)."""
        self.reason = UNSPECIFIED_ERROR
        self.release()

    def undelivered(self, reason: int) -> None:
        """A delivery the routing counted was delivered nowhere on the node it went to
        (its PUBLISH_ACK says why): one fewer (``release``)."""
        self.delivered -= 1
        if reason == ReasonCode.QUOTA_EXCEEDED:
            self.quota = True
        self.release()

    def outcome(self) -> int:
        """The ack's reason code: an error, else 0x97 when every delivery was dropped for a
        quota (as on one node), 0x10 when there was none, else success."""
        if self.reason or self.delivered > 0:
            return self.reason
        if self.quota:
            return ReasonCode.QUOTA_EXCEEDED
        return ReasonCode.NO_MATCHING_SUBSCRIBERS


class AckGate:
    """The held acknowledgements of every publisher on this node."""

    __slots__ = (
        "_by_conn",
        "_one",
        "_one_count",
        "_paused",
        "_pubcomps",
        "_qos2",
        "failed",
        "held",
        "limit",
    )

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)  # per connection: the server's Receive Maximum
        self.held = 0  # acknowledgements waiting now
        self.failed = 0  # acknowledgements refused: a record of the message was not written
        # held acks per connection: the first connection counted while no other one is kept
        # in a slot (``_one``, its count ``_one_count``), the others in ``_by_conn``; a
        # connection is in one of them at most. At low rates each held ack is released before
        # the next is counted: the slot, no dict insertion and removal per durable message.
        self._one: ClientConnection | None = None
        self._one_count = 0
        self._by_conn: dict[ClientConnection, int] = {}
        self._paused: set[ClientConnection] = set()
        self._qos2: dict[tuple[str, int], HeldAck] = {}  # held PUBRECs
        self._pubcomps: dict[tuple[str, int], HeldAck] = {}

    def begin(self, conn: ClientConnection, client_id: str, qos: int, packet_id: int) -> HeldAck:
        """A held ack for a PUBLISH about to be routed (released by the caller when done). A
        PUBACK is counted against the connection's window once something holds it (``waits``)."""
        if qos == 2:
            self.count(conn)
            held = HeldAck(self, conn, client_id, _PUBREC, packet_id)
            self._qos2[(client_id, packet_id)] = held
        else:
            held = HeldAck(self, conn, client_id, _PUBACK, packet_id, False)
        self.held += 1
        return held

    def complete(self, conn: ClientConnection, client_id: str, packet_id: int) -> HeldAck:
        """A held PUBCOMP for a PUBREL whose packet id is about to be removed from the store
        (released by the caller once the removal is queued)."""
        self.count(conn)
        held = HeldAck(self, conn, client_id, _PUBCOMP, packet_id)
        self._pubcomps[(client_id, packet_id)] = held
        self.held += 1
        return held

    def resent(self, conn: ClientConnection, client_id: str, packet_id: int) -> bool:
        """A QoS 2 PUBLISH sent again (after a reconnect) while its PUBREC is still held:
        the PUBREC will go to ``conn`` when the records are written. False if none is held."""
        return self._to_conn(self._qos2, conn, client_id, packet_id)

    def released_again(self, conn: ClientConnection, client_id: str, packet_id: int) -> bool:
        """A PUBREL sent again (after a reconnect) while its PUBCOMP is still held: the PUBCOMP
        will go to ``conn`` when the id's removal is written. False if none is held."""
        return self._to_conn(self._pubcomps, conn, client_id, packet_id)

    def _to_conn(
        self,
        waiting: dict[tuple[str, int], HeldAck],
        conn: ClientConnection,
        client_id: str,
        packet_id: int,
    ) -> bool:
        held = waiting.get((client_id, packet_id))
        if held is None:
            return False
        if held.conn is not conn:
            self._forget_conn(held.conn)
            self.count(conn)
            held.conn = conn
        return True

    def done(self, held: HeldAck) -> None:
        """Every record of the message is written: the acknowledgement goes out."""
        self.held -= 1
        kind = held.kind
        if kind != _PUBACK:
            waiting = self._qos2 if kind == _PUBREC else self._pubcomps
            key = (held.client_id, held.packet_id)
            if waiting.get(key) is held:
                del waiting[key]
        conn = held.conn
        if held.counted:
            self._forget_conn(conn)
        if held.reason >= UNSPECIFIED_ERROR:
            self._refuse(held)
            return
        reason = held.outcome()
        if reason >= UNSPECIFIED_ERROR and kind == _PUBREC:
            self._forget_id(held)  # a PUBREC >= 0x80 ends the exchange: no PUBREL will come
        write_ack(conn, kind, held.packet_id, reason)

    def _refuse(self, held: HeldAck) -> None:
        """A record of the message was not written: never a success."""
        self.failed += 1
        conn = held.conn
        if held.kind == _PUBREC:
            self._forget_id(held)  # not received: the id is free again
        if held.kind == _PUBCOMP or conn.version != MQTT_5:
            conn.link.close()  # no ack: the client sends it again after reconnecting
            return
        write_ack(conn, held.kind, held.packet_id, held.reason)

    @staticmethod
    def _forget_id(held: HeldAck) -> None:
        session = held.conn.session
        if session is not None and session.client_id == held.client_id:
            session.inbound_released(held.packet_id)

    def waiting(self, conn: ClientConnection) -> int:
        """Acknowledgements held for one connection."""
        if conn is self._one:
            return self._one_count
        return self._by_conn.get(conn, 0)

    def count(self, conn: ClientConnection) -> None:
        """One more held ack of ``conn`` (``HeldAck.waits``): at the server's Receive Maximum,
        it is not read until one goes."""
        one = self._one
        by_conn = self._by_conn
        if conn is one:
            count = self._one_count = self._one_count + 1
        elif one is None and not by_conn:  # (none in the dict: ``conn`` is not there either)
            self._one = conn
            count = self._one_count = 1
        else:
            count = by_conn.get(conn, 0) + 1
            by_conn[conn] = count
        if count >= self.limit and conn not in self._paused:
            self._paused.add(conn)  # its in-flight window is full: read no more for now
            conn.link.pause_reading()

    def _forget_conn(self, conn: ClientConnection) -> None:
        if conn is self._one:
            count = self._one_count - 1
            self._one_count = count
            if count == 0:
                self._one = None
        else:
            by_conn = self._by_conn
            count = by_conn.get(conn, 0) - 1
            if count > 0:
                by_conn[conn] = count
            elif count == 0:  # (-1: it had none counted, so no entry)
                del by_conn[conn]
        paused = self._paused  # (empty unless a publisher filled its window: no look-up)
        if paused and count < self.limit and conn in paused:
            paused.discard(conn)
            conn.link.resume_reading()


def write_ack(conn: ClientConnection, kind: int, packet_id: int, reason: int) -> None:
    """PUBACK / PUBREC / PUBCOMP (a reason code only when not success and the client speaks MQTT 5).

    A closed connection's link drops the bytes: its client re-sends the PUBLISH after
    reconnecting.
    """
    if kind == _PUBACK:  # (each encoder called directly: a native call, not a generic one)
        data = puback_bytes(packet_id, reason, conn.version)
    elif kind == _PUBREC:
        data = pubrec_bytes(packet_id, reason, conn.version)
    else:
        data = pubcomp_bytes(packet_id, reason, conn.version)
    conn.link.write(data)

"""The outbound QoS 1/2 state machine of one delivery: acknowledgements in, actions out.

Sans-IO, after h11: this module owns every transition of a message the broker sends at QoS 1
or 2, the state is one explicit field, and each method takes what happened (the PUBLISH got
its packet id, a PUBACK / PUBREC / PUBCOMP came, the store answered, the client reconnected)
and returns what the caller must do (write the PUBLISH, write the PUBREL, complete: free the
packet id and forget the record, ...). Writing bytes, the in-flight map, the durable store and
the owed-writes line are the caller's (``core.session``, ``core.owed_writes``).

::

    QUEUED --start--> AWAIT_PUBACK --PUBACK--> DONE                               (QoS 1)
    QUEUED --start--> AWAIT_PUBREC --PUBREC--> AWAIT_PUBCOMP --PUBCOMP--> DONE    (QoS 2)

A write may wait (``start`` / ``on_pubrec`` with ``hold``): for the durable store to answer
the write of the delivery's state (``AFTER_STORE``: ``PUBLISH_OWED`` / ``PUBREL_OWED``, then
``recorded``) and for the writes owed before it (``IN_TURN``: ``PUBLISH_DUE`` / ``PUBREL_DUE``,
then ``due`` writes it). See ``core.owed_writes``.

Protocol violations (the client acknowledged with the wrong packet for the id's QoS or state:
a PUBACK for a QoS 2 message, a PUBCOMP before its PUBREC, a PUBREC for a QoS 1 message) give
``VIOLATION`` and change nothing; the caller closes the connection (0x82, MQTT 5 4.13).
An unknown packet id has no flight: ``no_flight_for`` says what to answer.
"""

from __future__ import annotations

from typing import Final

# -- states ---------------------------------------------------------------------------------

QUEUED: Final = 0
"""No packet id yet: waiting in the session's queue (or just created)."""
PUBLISH_OWED: Final = 1
"""Has its packet id; its PUBLISH waits for the store to record that id (QoS 2, ids first)."""
PUBLISH_DUE: Final = 2
"""Has its packet id; its PUBLISH waits only for the writes owed before it (or a connection)."""
AWAIT_PUBACK: Final = 3
"""QoS 1 PUBLISH written, waiting for PUBACK."""
AWAIT_PUBREC: Final = 4
"""QoS 2 PUBLISH written, waiting for PUBREC."""
PUBREL_OWED: Final = 5
"""PUBREC received; the PUBREL waits for the store to record the released state."""
PUBREL_DUE: Final = 6
"""PUBREC received; the PUBREL waits only for the writes owed before it (or a connection)."""
AWAIT_PUBCOMP: Final = 7
"""PUBREL written, waiting for PUBCOMP."""
DONE: Final = 8
"""Acknowledged, or given up (too large for the client, expired, revoked, taken back)."""

STATE_NAMES: Final = (
    "QUEUED",
    "PUBLISH_OWED",
    "PUBLISH_DUE",
    "AWAIT_PUBACK",
    "AWAIT_PUBREC",
    "PUBREL_OWED",
    "PUBREL_DUE",
    "AWAIT_PUBCOMP",
    "DONE",
)

# -- how a write may wait (the caller knows its store and its owed line) ---------------------

SEND_NOW: Final = 0
"""Nothing to wait for: the packet is written now."""
AFTER_STORE: Final = 1
"""The packet waits for the store to record the delivery's state (then ``recorded``)."""
IN_TURN: Final = 2
"""The packet waits behind the writes owed before it (then ``due``)."""

# -- actions --------------------------------------------------------------------------------

NOTHING: Final = 0
"""Nothing to do (a duplicate, a write already on its way)."""
WRITE_PUBLISH: Final = 1
"""Write the PUBLISH under the flight's packet id."""
WRITE_PUBLISH_DUP: Final = 2
"""Write the PUBLISH again, DUP set (a resumed session's reconnect)."""
WRITE_PUBREL: Final = 3
"""Write a PUBREL for the flight's packet id."""
RECORD_STATE: Final = 4
"""Ask the store to record the new state; the write waits in the owed line (``recorded``)."""
WAIT_TURN: Final = 5
"""Put the write in the owed line; it goes when the writes before it have gone (``due``)."""
COMPLETE: Final = 6
"""The flight is over: free its packet id, forget its record, tell whoever waits for it."""
NOT_FOUND: Final = 7
"""Answer 0x92 (Packet Identifier not found): a PUBREC for an id not (yet) written."""
VIOLATION: Final = 8
"""A protocol error by the client (see the module doc): close the connection with 0x82."""

_RELEASED: Final = frozenset((PUBREL_OWED, PUBREL_DUE, AWAIT_PUBCOMP))
_OWED: Final = frozenset((PUBLISH_OWED, PUBLISH_DUE, PUBREL_OWED, PUBREL_DUE))
_UNACKNOWLEDGED_QOS1: Final = frozenset((PUBLISH_OWED, PUBLISH_DUE, AWAIT_PUBACK))
_FAILED: Final = 0x80


class OutboundFlight:
    """The QoS state of one outbound QoS 1/2 message to one session.

    ``packet_id`` (0 while queued), ``qos`` and ``state`` are read by anyone and changed only
    by these methods (a subclass's constructor starts them at 0, its QoS, ``QUEUED``).
    """

    __slots__ = ("packet_id", "qos", "state")

    packet_id: int
    qos: int
    state: int

    def __init__(self, qos: int) -> None:
        self.qos = qos
        self.packet_id = 0
        self.state = QUEUED

    # -- what the caller reads --------------------------------------------------------------

    @property
    def released(self) -> bool:
        """QoS 2: PUBREC received (its PUBREL written or owed), waiting for PUBCOMP."""
        return self.state in _RELEASED

    @property
    def owed(self) -> bool:
        """A write of it waits in the session's owed line (for the store or its turn)."""
        return self.state in _OWED

    @property
    def waits_for_store(self) -> bool:
        """Its next write waits for the store to record its state (``recorded``)."""
        return self.state == PUBLISH_OWED or self.state == PUBREL_OWED

    # -- transitions ------------------------------------------------------------------------

    def start(self, packet_id: int, hold: int) -> int:
        """A queued flight gets ``packet_id``: ``WRITE_PUBLISH`` (``SEND_NOW``), else its
        PUBLISH waits (``RECORD_STATE`` for ``AFTER_STORE``, ``WAIT_TURN`` for ``IN_TURN``)."""
        if self.state != QUEUED:
            raise RuntimeError(f"start in state {STATE_NAMES[self.state]}")
        self.packet_id = packet_id
        if hold == SEND_NOW:
            self.state = AWAIT_PUBACK if self.qos == 1 else AWAIT_PUBREC
            return WRITE_PUBLISH
        if hold == AFTER_STORE:
            self.state = PUBLISH_OWED
            return RECORD_STATE
        self.state = PUBLISH_DUE
        return WAIT_TURN

    def restore(self, packet_id: int, released: bool) -> None:
        """A flight read back from the store after a restart or takeover: in flight under
        ``packet_id`` (``released``: its PUBREC came), written before (``resend`` re-sends)."""
        if self.state != QUEUED:
            raise RuntimeError(f"restore in state {STATE_NAMES[self.state]}")
        self.packet_id = packet_id
        if released and self.qos == 2:
            self.state = AWAIT_PUBCOMP
        else:
            self.state = AWAIT_PUBACK if self.qos == 1 else AWAIT_PUBREC

    def on_puback(self) -> int:
        """PUBACK received: ``COMPLETE`` for a QoS 1 flight (also one whose PUBLISH is still
        owed: the client has it from an earlier connection), ``VIOLATION`` for QoS 2."""
        state = self.state
        if state == AWAIT_PUBACK or (self.qos == 1 and state in _UNACKNOWLEDGED_QOS1):
            self.state = DONE
            return COMPLETE
        if state in (QUEUED, DONE):
            return NOTHING
        return VIOLATION

    def on_pubrec(self, reason: int, hold: int) -> int:
        """PUBREC received. Success: the flight is released and its PUBREL goes (as ``hold``
        says, like ``start``); again in ``AWAIT_PUBCOMP`` (a duplicate): the PUBREL again;
        while owed: ``NOTHING`` (on its way). A reason >= 0x80 ends the exchange:
        ``COMPLETE``. Before its PUBLISH was written: ``NOT_FOUND``; for QoS 1: ``VIOLATION``."""
        state = self.state
        if self.qos != 2:
            return NOTHING if state in (QUEUED, DONE) else VIOLATION
        if state in (QUEUED, DONE):
            return NOT_FOUND
        if reason >= _FAILED:
            self.state = DONE
            return COMPLETE
        if state == AWAIT_PUBREC:
            if hold == SEND_NOW:
                self.state = AWAIT_PUBCOMP
                return WRITE_PUBREL
            if hold == AFTER_STORE:
                self.state = PUBREL_OWED
                return RECORD_STATE
            self.state = PUBREL_DUE
            return WAIT_TURN
        if state == AWAIT_PUBCOMP:
            return WRITE_PUBREL
        if state in (PUBREL_OWED, PUBREL_DUE):
            return NOTHING
        return NOT_FOUND  # PUBLISH_OWED / PUBLISH_DUE: not written yet

    def on_pubcomp(self) -> int:
        """PUBCOMP received: ``COMPLETE`` once released (also while its PUBREL is owed: the
        client has it from an earlier connection); before the PUBREC, or for QoS 1:
        ``VIOLATION``."""
        state = self.state
        if self.qos == 2 and state in _RELEASED:
            self.state = DONE
            return COMPLETE
        if state in (QUEUED, DONE):
            return NOTHING
        return VIOLATION

    def recorded(self) -> bool:
        """The store answered the write of the state a write waited for: True when that
        write may now go in its turn (``due``)."""
        state = self.state
        if state == PUBLISH_OWED:
            self.state = PUBLISH_DUE
            return True
        if state == PUBREL_OWED:
            self.state = PUBREL_DUE
            return True
        return False

    def due(self) -> int:
        """The flight is at the head of the owed line and may be written: ``WRITE_PUBLISH``
        or ``WRITE_PUBREL`` (the flight then awaits its acknowledgement); ``NOTHING`` when no
        write of it is due (still waiting for the store, or completed meanwhile)."""
        state = self.state
        if state == PUBLISH_DUE:
            self.state = AWAIT_PUBACK if self.qos == 1 else AWAIT_PUBREC
            return WRITE_PUBLISH
        if state == PUBREL_DUE:
            self.state = AWAIT_PUBCOMP
            return WRITE_PUBREL
        return NOTHING

    def resend(self) -> int:
        """The client reconnected to a resumed session: what to write again for this flight
        (``WRITE_PUBLISH_DUP``, ``WRITE_PUBREL``); ``NOTHING`` for a write still owed (it goes
        in its turn) or a flight not in flight."""
        state = self.state
        if state in (AWAIT_PUBACK, AWAIT_PUBREC):
            return WRITE_PUBLISH_DUP
        if state == AWAIT_PUBCOMP:
            return WRITE_PUBREL
        return NOTHING

    def give_up(self) -> None:
        """The flight ends unacknowledged (too large for the client, expired, its
        subscription revoked, taken back for another shared-group member, its session
        gone): ``DONE``, whatever it was."""
        self.state = DONE


def no_flight_for(packet_type: int) -> int:
    """What to answer an acknowledgement for a packet id with no flight: a PUBREC gets
    ``NOT_FOUND`` (a PUBREL 0x92, MQTT 5 4.3.3), a PUBACK or PUBCOMP ``NOTHING`` (a late
    duplicate, e.g. after a re-send)."""
    return NOT_FOUND if packet_type == 5 else NOTHING

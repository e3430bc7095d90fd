"""The outbound QoS state machine: every transition, every protocol violation, unknown ids.

No clock and no I/O: acknowledgements in, actions out (``xmq.protocol.outbound_qos``).
"""

from __future__ import annotations

import pytest

from xmq.codec.packets import PacketType
from xmq.protocol.outbound_qos import (
    AFTER_STORE,
    AWAIT_PUBACK,
    AWAIT_PUBCOMP,
    AWAIT_PUBREC,
    COMPLETE,
    DONE,
    IN_TURN,
    NOT_FOUND,
    NOTHING,
    PUBLISH_DUE,
    PUBLISH_OWED,
    PUBREL_DUE,
    PUBREL_OWED,
    QUEUED,
    RECORD_STATE,
    SEND_NOW,
    STATE_NAMES,
    VIOLATION,
    WAIT_TURN,
    WRITE_PUBLISH,
    WRITE_PUBLISH_DUP,
    WRITE_PUBREL,
    OutboundFlight,
    no_flight_for,
)

_QOS1_STATES = (QUEUED, PUBLISH_OWED, PUBLISH_DUE, AWAIT_PUBACK, DONE)
_QOS2_STATES = (
    QUEUED,
    PUBLISH_OWED,
    PUBLISH_DUE,
    AWAIT_PUBREC,
    PUBREL_OWED,
    PUBREL_DUE,
    AWAIT_PUBCOMP,
    DONE,
)


def flight_in(state: int, qos: int, packet_id: int = 7) -> OutboundFlight:
    """A flight driven into ``state`` through the machine's own transitions."""
    flight = OutboundFlight(qos)
    if state == QUEUED:
        return flight
    if state == DONE:
        flight.start(packet_id, SEND_NOW)
        flight.give_up()
        return flight
    if state in (PUBLISH_OWED, PUBLISH_DUE):
        flight.start(packet_id, AFTER_STORE)
        if state == PUBLISH_DUE:
            assert flight.recorded()
        return flight
    assert flight.start(packet_id, SEND_NOW) == WRITE_PUBLISH
    if state in (AWAIT_PUBACK, AWAIT_PUBREC):
        return flight
    if state in (PUBREL_OWED, PUBREL_DUE):
        assert flight.on_pubrec(0, AFTER_STORE) == RECORD_STATE
        if state == PUBREL_DUE:
            assert flight.recorded()
        return flight
    assert flight.on_pubrec(0, SEND_NOW) == WRITE_PUBREL
    return flight


@pytest.mark.parametrize(("qos", "states"), [(1, _QOS1_STATES), (2, _QOS2_STATES)])
def test_flight_in_reaches_every_state(qos: int, states: tuple[int, ...]) -> None:
    for state in states:
        assert flight_in(state, qos).state == state, STATE_NAMES[state]


# -- the two flows end to end ----------------------------------------------------------------


def test_qos1_publish_then_puback() -> None:
    flight = OutboundFlight(1)
    assert (flight.state, flight.packet_id) == (QUEUED, 0)
    assert flight.start(5, SEND_NOW) == WRITE_PUBLISH
    assert (flight.state, flight.packet_id) == (AWAIT_PUBACK, 5)
    assert flight.on_puback() == COMPLETE
    assert flight.state == DONE
    assert flight.on_puback() == NOTHING  # a duplicate changes nothing


def look(flight: OutboundFlight) -> tuple[str, bool, bool, bool]:
    """(state, released, owed, waits for the store): read through a call, so that mypy does
    not narrow the attributes between transitions."""
    return STATE_NAMES[flight.state], flight.released, flight.owed, flight.waits_for_store


def test_qos2_publish_pubrec_pubrel_pubcomp() -> None:
    flight = OutboundFlight(2)
    assert flight.start(9, SEND_NOW) == WRITE_PUBLISH
    assert look(flight) == ("AWAIT_PUBREC", False, False, False)
    assert flight.on_pubrec(0, SEND_NOW) == WRITE_PUBREL
    assert look(flight) == ("AWAIT_PUBCOMP", True, False, False)
    assert flight.on_pubrec(0, SEND_NOW) == WRITE_PUBREL  # a duplicate PUBREC: PUBREL again
    assert flight.state == AWAIT_PUBCOMP
    assert flight.on_pubcomp() == COMPLETE
    assert flight.state == DONE
    assert flight.on_pubcomp() == NOTHING


def test_qos2_writes_that_wait_for_the_store() -> None:
    flight = OutboundFlight(2)
    assert flight.start(3, AFTER_STORE) == RECORD_STATE
    assert look(flight) == ("PUBLISH_OWED", False, True, True)
    assert flight.due() == NOTHING  # not before the store answered
    assert look(flight) == ("PUBLISH_OWED", False, True, True)
    assert flight.recorded()
    assert look(flight) == ("PUBLISH_DUE", False, True, False)
    assert not flight.recorded()  # answered once
    assert flight.due() == WRITE_PUBLISH
    assert look(flight) == ("AWAIT_PUBREC", False, False, False)
    assert flight.on_pubrec(0, AFTER_STORE) == RECORD_STATE
    assert look(flight) == ("PUBREL_OWED", True, True, True)
    assert flight.on_pubrec(0, AFTER_STORE) == NOTHING  # its PUBREL is on its way
    assert flight.due() == NOTHING
    assert flight.recorded()
    assert look(flight) == ("PUBREL_DUE", True, True, False)
    assert flight.due() == WRITE_PUBREL
    assert look(flight) == ("AWAIT_PUBCOMP", True, False, False)
    assert flight.due() == NOTHING  # written once
    assert flight.on_pubcomp() == COMPLETE
    assert look(flight) == ("DONE", False, False, False)


@pytest.mark.parametrize("qos", [1, 2])
def test_writes_in_turn(qos: int) -> None:
    flight = OutboundFlight(qos)
    assert flight.start(4, IN_TURN) == WAIT_TURN
    assert flight.state == PUBLISH_DUE and flight.owed and not flight.waits_for_store
    assert not flight.recorded()
    assert flight.due() == WRITE_PUBLISH
    assert flight.state == (AWAIT_PUBACK if qos == 1 else AWAIT_PUBREC)
    if qos == 2:
        assert flight.on_pubrec(0, IN_TURN) == WAIT_TURN
        assert flight.state == PUBREL_DUE
        assert flight.due() == WRITE_PUBREL
        assert flight.state == AWAIT_PUBCOMP


def test_qos1_owed_publish_acknowledged_before_it_went() -> None:
    """A resumed session's client may acknowledge an id it saw on an earlier connection."""
    for state in (PUBLISH_OWED, PUBLISH_DUE):
        flight = flight_in(state, 1)
        assert flight.on_puback() == COMPLETE
        assert flight.state == DONE
        assert flight.due() == NOTHING  # the owed line skips it


# -- every acknowledgement in every state ----------------------------------------------------

# (qos, state) -> expected (action, next state) for PUBACK, PUBREC (success, sent at once),
# PUBREC >= 0x80, PUBCOMP
_U = None  # unchanged
_TABLE: dict[tuple[int, int], tuple[tuple[int, int | None], ...]] = {
    (1, QUEUED): ((NOTHING, _U), (NOTHING, _U), (NOTHING, _U), (NOTHING, _U)),
    (1, PUBLISH_OWED): ((COMPLETE, DONE), (VIOLATION, _U), (VIOLATION, _U), (VIOLATION, _U)),
    (1, PUBLISH_DUE): ((COMPLETE, DONE), (VIOLATION, _U), (VIOLATION, _U), (VIOLATION, _U)),
    (1, AWAIT_PUBACK): ((COMPLETE, DONE), (VIOLATION, _U), (VIOLATION, _U), (VIOLATION, _U)),
    (1, DONE): ((NOTHING, _U), (NOTHING, _U), (NOTHING, _U), (NOTHING, _U)),
    (2, QUEUED): ((NOTHING, _U), (NOT_FOUND, _U), (NOT_FOUND, _U), (NOTHING, _U)),
    (2, PUBLISH_OWED): ((VIOLATION, _U), (NOT_FOUND, _U), (COMPLETE, DONE), (VIOLATION, _U)),
    (2, PUBLISH_DUE): ((VIOLATION, _U), (NOT_FOUND, _U), (COMPLETE, DONE), (VIOLATION, _U)),
    (2, AWAIT_PUBREC): (
        (VIOLATION, _U),
        (WRITE_PUBREL, AWAIT_PUBCOMP),
        (COMPLETE, DONE),
        (VIOLATION, _U),
    ),
    (2, PUBREL_OWED): ((VIOLATION, _U), (NOTHING, _U), (COMPLETE, DONE), (COMPLETE, DONE)),
    (2, PUBREL_DUE): ((VIOLATION, _U), (NOTHING, _U), (COMPLETE, DONE), (COMPLETE, DONE)),
    (2, AWAIT_PUBCOMP): ((VIOLATION, _U), (WRITE_PUBREL, _U), (COMPLETE, DONE), (COMPLETE, DONE)),
    (2, DONE): ((NOTHING, _U), (NOT_FOUND, _U), (NOT_FOUND, _U), (NOTHING, _U)),
}


def test_the_table_covers_every_state() -> None:
    assert {s for (q, s) in _TABLE if q == 1} == set(_QOS1_STATES)
    assert {s for (q, s) in _TABLE if q == 2} == set(_QOS2_STATES)


@pytest.mark.parametrize(("qos", "state"), sorted(_TABLE))
@pytest.mark.parametrize("event", ["puback", "pubrec", "pubrec_failed", "pubcomp"])
def test_every_acknowledgement_in_every_state(qos: int, state: int, event: str) -> None:
    flight = flight_in(state, qos)
    column = ("puback", "pubrec", "pubrec_failed", "pubcomp").index(event)
    action, after = _TABLE[(qos, state)][column]
    if event == "puback":
        got = flight.on_puback()
    elif event == "pubrec":
        got = flight.on_pubrec(0, SEND_NOW)
    elif event == "pubrec_failed":
        got = flight.on_pubrec(0x80, SEND_NOW)
    else:
        got = flight.on_pubcomp()
    assert got == action, (STATE_NAMES[state], event)
    assert flight.state == (state if after is None else after), (STATE_NAMES[state], event)
    assert flight.packet_id == (0 if state == QUEUED else 7)


def test_puback_for_a_qos2_message_is_a_violation_that_changes_nothing() -> None:
    flight = flight_in(AWAIT_PUBREC, 2)
    assert flight.on_puback() == VIOLATION
    assert flight.state == AWAIT_PUBREC
    assert flight.on_pubrec(0, SEND_NOW) == WRITE_PUBREL  # the exchange goes on


def test_pubcomp_before_pubrec_is_a_violation() -> None:
    flight = flight_in(AWAIT_PUBREC, 2)
    assert flight.on_pubcomp() == VIOLATION
    assert flight.state == AWAIT_PUBREC


def test_unknown_ids() -> None:
    assert no_flight_for(PacketType.PUBREC) == NOT_FOUND  # PUBREL 0x92
    assert no_flight_for(PacketType.PUBACK) == NOTHING
    assert no_flight_for(PacketType.PUBCOMP) == NOTHING


# -- reconnect, restore, giving up -----------------------------------------------------------

_RESEND = {
    QUEUED: NOTHING,
    PUBLISH_OWED: NOTHING,  # never written: it goes in its turn
    PUBLISH_DUE: NOTHING,
    AWAIT_PUBACK: WRITE_PUBLISH_DUP,
    AWAIT_PUBREC: WRITE_PUBLISH_DUP,
    PUBREL_OWED: NOTHING,
    PUBREL_DUE: NOTHING,
    AWAIT_PUBCOMP: WRITE_PUBREL,
    DONE: NOTHING,
}


@pytest.mark.parametrize(("qos", "state"), sorted(_TABLE))
def test_resend_after_a_reconnect(qos: int, state: int) -> None:
    flight = flight_in(state, qos)
    assert flight.resend() == _RESEND[state]
    assert flight.state == state  # re-sending moves nothing


@pytest.mark.parametrize(
    ("qos", "released", "state"),
    [
        (1, False, AWAIT_PUBACK),
        (1, True, AWAIT_PUBACK),
        (2, False, AWAIT_PUBREC),
        (2, True, AWAIT_PUBCOMP),
    ],
)
def test_restore(qos: int, released: bool, state: int) -> None:
    flight = OutboundFlight(qos)
    flight.restore(42, released)
    assert (flight.packet_id, flight.state) == (42, state)
    assert flight.resend() == (WRITE_PUBREL if state == AWAIT_PUBCOMP else WRITE_PUBLISH_DUP)


@pytest.mark.parametrize(("qos", "state"), [k for k in sorted(_TABLE) if k[1] != QUEUED])
def test_start_and_restore_only_from_queued(qos: int, state: int) -> None:
    flight = flight_in(state, qos)
    with pytest.raises(RuntimeError):
        flight.start(8, SEND_NOW)
    with pytest.raises(RuntimeError):
        flight.restore(8, False)
    assert flight.state == state


@pytest.mark.parametrize(("qos", "state"), sorted(_TABLE))
def test_give_up_ends_any_flight(qos: int, state: int) -> None:
    flight = flight_in(state, qos)
    flight.give_up()
    assert flight.state == DONE
    assert not flight.owed and not flight.released and not flight.waits_for_store
    assert flight.due() == NOTHING and flight.resend() == NOTHING

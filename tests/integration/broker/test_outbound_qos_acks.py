"""A subscriber's acknowledgements of QoS 1/2 deliveries, right and wrong, against the broker.

The outbound QoS state machine (``xmq.protocol.outbound_qos``) says what each one does; here
real broker processes and raw clients check it end to end: the wrong acknowledgement for a
delivery's QoS or state is a Protocol Error (DISCONNECT 0x82, MQTT 5 4.13), an unknown packet
id is not (PUBREC: PUBREL 0x92; PUBACK / PUBCOMP: ignored), and a delivery completed by the
right one frees its packet id.
"""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import (
    RawClient,
    closing_reason,
    connected,
    next_publish,
    subscribed,
)
from xmq.codec.packets import (
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)

pytestmark = pytest.mark.integration


def _delivered(broker: BrokerProcess, uid: str, qos: int) -> tuple[RawClient, RawClient, int]:
    """A subscriber holding one QoS ``qos`` delivery in flight (and the publisher)."""
    sub = connected(broker.port, f"{uid}-sub")
    subscribed(sub, f"{uid}/t", qos)
    pub = connected(broker.port, f"{uid}-pub")
    pub.send_packet(Publish(f"{uid}/t", b"x", qos=qos, packet_id=1))
    packet = next_publish(sub)
    assert packet.qos == qos and packet.packet_id
    return sub, pub, packet.packet_id


@pytest.mark.parametrize(
    ("qos", "wrong"),
    [(2, Puback), (2, Pubcomp), (1, Pubrec), (1, Pubcomp)],
    ids=["puback-for-qos2", "pubcomp-before-pubrec", "pubrec-for-qos1", "pubcomp-for-qos1"],
)
def test_the_wrong_acknowledgement_is_a_protocol_error(
    broker: BrokerProcess, uid: str, qos: int, wrong: type[Puback] | type[Pubrec] | type[Pubcomp]
) -> None:
    sub, pub, packet_id = _delivered(broker, uid, qos)
    try:
        sub.send_packet(wrong(packet_id))
        assert closing_reason(sub) == 0x82
    finally:
        sub.close()
        pub.close()


def test_a_pubcomp_after_its_pubrec_completes_and_frees_the_id(
    broker: BrokerProcess, uid: str
) -> None:
    sub, pub, packet_id = _delivered(broker, uid, 2)
    try:
        sub.send_packet(Pubrec(packet_id))
        assert sub.read_packet() == Pubrel(packet_id)
        sub.send_packet(Pubrec(packet_id))  # a duplicate PUBREC: the PUBREL again
        assert sub.read_packet() == Pubrel(packet_id)
        sub.send_packet(Pubcomp(packet_id))
        sub.send_packet(Pubcomp(packet_id))  # late duplicate: ignored, no error
        sub.send_packet(Pingreq())
        assert isinstance(sub.read_packet(), Pingresp)
        sub.send_packet(Pubrec(packet_id))  # completed: the id is unknown now
        assert sub.read_packet() == Pubrel(packet_id, 0x92)
    finally:
        sub.close()
        pub.close()


@pytest.mark.parametrize("ack", [Puback, Pubcomp], ids=["puback", "pubcomp"])
def test_an_unknown_id_is_ignored(
    broker: BrokerProcess, uid: str, ack: type[Puback] | type[Pubcomp]
) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(ack(4321))
        raw.send_packet(Pingreq())
        assert isinstance(raw.read_packet(), Pingresp)  # nothing before it, still connected
    finally:
        raw.close()


def test_a_pubrec_for_an_unknown_id_gets_pubrel_0x92(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Pubrec(4321))
        assert raw.read_packet() == Pubrel(4321, 0x92)
    finally:
        raw.close()


def test_a_wrong_acknowledgement_closes_a_311_client_silently(
    broker: BrokerProcess, uid: str
) -> None:
    sub = connected(broker.port, f"{uid}-sub", version=4)
    pub = connected(broker.port, f"{uid}-pub")
    try:
        subscribed(sub, f"{uid}/t", 2)
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=2, packet_id=1))
        packet_id = next_publish(sub).packet_id
        sub.send_packet(Puback(packet_id))
        assert sub.read_until_closed() == []  # 3.1.1 has no DISCONNECT from the server
    finally:
        sub.close()
        pub.close()

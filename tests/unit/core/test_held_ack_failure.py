"""A record that was not written never gets a successful acknowledgement."""

from __future__ import annotations

from tests.support.sink_link import SinkLink
from xmq.codec.packets import MQTT_5, Puback, Pubrec
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.connection import ClientConnection
from xmq.core.held_acks import AckGate
from xmq.core.session import QueueLimits, Session
from xmq.core.settings import CoreSettings
from xmq.core.stats import BrokerStats


def _session() -> Session:
    session = Session("pub", QueueLimits(10, 1 << 20, 1 << 24, 10), BrokerStats())
    session.inbound_received(5)
    return session


class FakeConn:
    """A real connection over a sink link (the compiled gate takes no stand-in), not logged
    in: the gate only writes to its link, closes it, reads its version and its session."""

    def __init__(self, version: int = MQTT_5) -> None:
        self.link = SinkLink()
        self.session = _session()
        self.conn = ClientConnection(
            Broker(CoreSettings()), self.link, AnonymousAuthenticator(), AllowAll()
        )
        self.conn.version = version
        self.conn.session = self.session


def _conn(fake: FakeConn) -> ClientConnection:
    return fake.conn


async def test_a_failed_record_gives_mqtt_5_an_error_reason_not_success() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 1, 3)
    held.hold()  # a record
    held.release()  # routing over
    held.fail()  # the record was given up
    assert fake.link.packets() == [Puback(3, 0x80)]
    assert not fake.link.closed
    assert gate.failed == 1 and gate.held == 0


async def test_a_failed_record_of_a_released_hold_still_fails_the_ack() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 1, 3)
    held.hold()
    held.hold()
    held.fail()  # one record given up ...
    held.release()  # ... another written
    assert fake.link.out == b""
    held.release()  # routing over: the ack is an error, whatever came after the failure
    assert fake.link.packets() == [Puback(3, 0x80)]


async def test_mqtt_311_gets_no_ack_its_connection_is_closed() -> None:
    gate = AckGate(10)
    fake = FakeConn(version=4)
    held = gate.begin(_conn(fake), "pub", 1, 3)
    held.fail()
    assert fake.link.out == b""
    assert fake.link.closed


async def test_a_failed_pubrec_frees_the_packet_id() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 2, 5)
    held.fail()
    assert fake.link.packets() == [Pubrec(5, 0x80)]
    assert 5 not in fake.session.inbound_qos2  # a re-send is routed as new, not ignored
    assert not gate.resent(_conn(fake), "pub", 5)


async def test_a_failed_pubcomp_closes_the_connection() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.complete(_conn(fake), "pub", 5)
    held.fail()
    assert fake.link.out == b""
    assert fake.link.closed


async def test_the_routing_s_reason_does_not_override_a_failed_record() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 1, 3)
    held.hold()
    held.fail()  # a record given up before the routing is over
    held.routed(0, False)  # delivered nowhere else: "no matching subscribers" would be a success
    assert fake.link.packets() == [Puback(3, 0x80)]


async def test_the_routing_s_reason_goes_in_the_ack() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 1, 3)
    held.routed(0, False)
    assert fake.link.packets() == [Puback(3, 0x10)]

"""Sessions: clean start, expiry, takeover, resumed in-flight messages, wills, keep alive."""

from __future__ import annotations

import time

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import V5, V311, PahoClient, props
from tests.support.raw_client import RawClient


def _expiry(seconds: int) -> object:
    return props(PacketTypes.CONNECT, SessionExpiryInterval=seconds)


@pytest.mark.spec(
    "5:MQTT-3.1.2-5",
    "5:MQTT-3.1.2-23",
    "5:MQTT-3.2.2-3",
    "5:MQTT-4.6.0-6",
    "5:MQTT-3.1.3-2",
)
def test_persistent_session_queues_while_offline(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    sub.connect(clean_start=True, properties=_expiry(300))  # type: ignore[arg-type]
    sub.subscribe(f"{uid}/q", 1)
    sub.disconnect()
    pub = PahoClient(broker.port, f"{uid}-p")
    pub.connect()
    for n in range(50):
        pub.publish(f"{uid}/q", f"{n}")
    pub.close()
    again = PahoClient(broker.port, f"{uid}-s")
    try:
        result = again.connect(clean_start=False, properties=_expiry(300))  # type: ignore[arg-type]
        assert result.session_present
        got = again.expect(50)
        assert [m.payload for m in got] == [str(n).encode() for n in range(50)]
    finally:
        again.close()


@pytest.mark.spec("5:MQTT-3.1.2-4", "5:MQTT-3.2.2-2")
def test_clean_start_discards_the_session(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    sub.connect(properties=_expiry(300))  # type: ignore[arg-type]
    sub.subscribe(f"{uid}/q", 1)
    sub.disconnect()
    again = PahoClient(broker.port, f"{uid}-s")
    try:
        assert not again.connect(clean_start=True).session_present
        pub = PahoClient(broker.port, f"{uid}-p")
        pub.connect()
        pub.publish(f"{uid}/q", b"x")
        pub.close()
        again.expect_none(0.3)
    finally:
        again.close()


@pytest.mark.spec("5:MQTT-3.2.2-3")
def test_session_expiry_zero_ends_at_disconnect(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    sub.connect(properties=_expiry(0))  # type: ignore[arg-type]
    sub.subscribe(f"{uid}/q", 1)
    sub.disconnect()
    again = PahoClient(broker.port, f"{uid}-s")
    try:
        assert not again.connect(clean_start=False).session_present
    finally:
        again.close()


@pytest.mark.spec("5:MQTT-4.1.0-2")
def test_session_expires_after_interval(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    sub.connect(properties=_expiry(1))  # type: ignore[arg-type]
    sub.subscribe(f"{uid}/q", 1)
    sub.disconnect()
    time.sleep(1.6)
    again = PahoClient(broker.port, f"{uid}-s")
    try:
        assert not again.connect(clean_start=False, properties=_expiry(1)).session_present  # type: ignore[arg-type]
    finally:
        again.close()


@pytest.mark.spec("3:MQTT-3.1.2-4", "3:MQTT-3.1.2-5", "3:MQTT-3.2.2-2")
def test_mqtt311_persistent_session(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s", V311)
    sub.connect(clean_start=False)
    sub.subscribe(f"{uid}/q", 2)
    sub.disconnect()
    pub = PahoClient(broker.port, f"{uid}-p", V311)
    pub.connect()
    pub.publish(f"{uid}/q", b"offline", qos=2)
    pub.close()
    again = PahoClient(broker.port, f"{uid}-s", V311)
    try:
        assert again.connect(clean_start=False).session_present
        [msg] = again.expect(1)
        assert (msg.payload, msg.qos) == (b"offline", 2)
    finally:
        again.close()


@pytest.mark.spec("5:MQTT-3.1.4-3")
def test_takeover_sends_session_taken_over(broker: BrokerProcess, uid: str) -> None:
    first = PahoClient(broker.port, f"{uid}-c")
    second = PahoClient(broker.port, f"{uid}-c")
    try:
        first.connect()
        second.connect()
        gone = first.disconnects.get(timeout=5)
        assert gone.reason == 0x8E
    finally:
        first.close()
        second.close()


@pytest.mark.spec("5:MQTT-3.1.3-6", "5:MQTT-3.1.3-7")
def test_assigned_client_identifier(broker: BrokerProcess) -> None:
    client = PahoClient(broker.port, "")
    try:
        result = client.connect()
        assert result.reason == 0
        assert result.properties.AssignedClientIdentifier
    finally:
        client.close()


@pytest.mark.spec("3:MQTT-3.1.3-8", "3:MQTT-3.2.2-5", "3:MQTT-3.1.3-9", "3:MQTT-3.2.2-4")
def test_mqtt311_empty_id_without_clean_session_is_refused(broker: BrokerProcess) -> None:
    raw = RawClient(broker.port, version=4)
    try:
        ack = raw.connect("", clean_start=False)
        assert ack.reason_code == 0x02  # identifier rejected
        assert raw.read_until_closed() == []
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.2-8", "5:MQTT-3.14.4-3")
def test_will_on_network_loss_not_on_normal_disconnect(broker: BrokerProcess, uid: str) -> None:
    watcher = PahoClient(broker.port, f"{uid}-w")
    watcher.connect()
    watcher.subscribe(f"{uid}/will", 1)
    polite = PahoClient(broker.port, f"{uid}-a")
    polite.client.will_set(f"{uid}/will", b"polite", qos=1)
    polite.connect()
    polite.disconnect()
    watcher.expect_none(0.4)
    rude = PahoClient(broker.port, f"{uid}-b")
    rude.client.will_set(f"{uid}/will", b"rude", qos=1)
    rude.connect()
    rude.drop()
    try:
        [msg] = watcher.expect(1)
        assert msg.payload == b"rude"
    finally:
        watcher.close()


@pytest.mark.spec("5:MQTT-3.1.2-8")
def test_disconnect_with_will_message(broker: BrokerProcess, uid: str) -> None:
    watcher = PahoClient(broker.port, f"{uid}-w")
    watcher.connect()
    watcher.subscribe(f"{uid}/will", 1)
    client = PahoClient(broker.port, f"{uid}-a")
    client.client.will_set(f"{uid}/will", b"bye", qos=1)
    client.connect()
    client.disconnect(reason=0x04)
    try:
        [msg] = watcher.expect(1)
        assert msg.payload == b"bye"
    finally:
        watcher.close()


@pytest.mark.spec("5:MQTT-3.1.2-8", "5:MQTT-3.1.3-9")
def test_will_delay_cancelled_by_reconnect(broker: BrokerProcess, uid: str) -> None:
    watcher = PahoClient(broker.port, f"{uid}-w")
    watcher.connect()
    watcher.subscribe(f"{uid}/will", 1)
    will_props = props(PacketTypes.WILLMESSAGE, WillDelayInterval=2)
    client = PahoClient(broker.port, f"{uid}-a")
    client.client.will_set(f"{uid}/will", b"late", qos=1, properties=will_props)
    client.connect(properties=_expiry(60))  # type: ignore[arg-type]
    client.drop()
    again = PahoClient(broker.port, f"{uid}-a")
    again.client.will_set(f"{uid}/will", b"later", qos=1, properties=will_props)
    again.connect(clean_start=False, properties=_expiry(60))  # type: ignore[arg-type]
    try:
        watcher.expect_none(2.5)  # the first will was cancelled by the resumed session
        again.drop()  # this time the delay passes with the client gone: published
        dropped = time.monotonic()
        [msg] = watcher.expect(1, timeout=5)
        assert msg.payload == b"later"
        assert time.monotonic() - dropped >= 1.5
    finally:
        watcher.close()


@pytest.mark.spec("5:MQTT-3.1.2-22")
def test_keep_alive_timeout_publishes_will(start_broker: object, uid: str) -> None:
    broker = start_broker()  # type: ignore[operator]
    watcher = PahoClient(broker.port, f"{uid}-w")
    watcher.connect()
    watcher.subscribe(f"{uid}/will", 1)
    raw = RawClient(broker.port)
    try:
        ack = raw.connect(f"{uid}-k", keep_alive=1, will=(f"{uid}/will", b"silent"))
        assert ack.reason_code == 0
        started = time.monotonic()
        disconnect = raw.read_packet(timeout=5)
        assert getattr(disconnect, "reason_code", None) == 0x8D
        assert time.monotonic() - started >= 1.0
        [msg] = watcher.expect(1)
        assert msg.payload == b"silent"
    finally:
        raw.close()
        watcher.close()


@pytest.mark.spec("5:MQTT-4.4.0-1", "5:MQTT-3.3.1-1", "5:MQTT-4.3.2-3")
def test_inflight_resent_with_dup_after_reconnect(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s", V5, auto_ack=False)
    sub.connect(properties=_expiry(60))  # type: ignore[arg-type]
    sub.subscribe(f"{uid}/q", 1)
    pub = PahoClient(broker.port, f"{uid}-p")
    pub.connect()
    pub.publish(f"{uid}/q", b"unacked")
    [first] = sub.expect(1)
    assert not first.dup
    sub.drop()  # never acknowledged
    again = PahoClient(broker.port, f"{uid}-s")
    try:
        again.connect(clean_start=False, properties=_expiry(60))  # type: ignore[arg-type]
        [msg] = again.expect(1)
        assert (msg.payload, msg.dup) == (b"unacked", True)
    finally:
        again.close()
        pub.close()


def test_v5_and_v311_interoperate(broker: BrokerProcess, uid: str) -> None:
    old = PahoClient(broker.port, f"{uid}-o", V311)
    new = PahoClient(broker.port, f"{uid}-n", V5)
    try:
        old.connect()
        new.connect()
        old.subscribe(f"{uid}/t", 1)
        new.publish(f"{uid}/t", b"x", properties=props(PacketTypes.PUBLISH, ContentType="c"))
        [msg] = old.expect(1)
        assert msg.payload == b"x"
    finally:
        old.close()
        new.close()

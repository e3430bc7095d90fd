"""Wills are checked at CONNECT like a PUBLISH: topic rules, `$` topics, the ACL with the
will's QoS and retain flag. A refused will refuses the CONNECT; nothing is published or
retained (raw CONNECT packets: libraries refuse to send most of these)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.accounts_file import OWN_DEVICES, user_client, write_accounts
from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import PahoClient
from tests.support.raw_client import RawClient
from xmq.codec.packets import MQTT_5, Connack, Connect, Will

pytestmark = pytest.mark.integration

PASSWORDS = {"a": "pass-a", "b": "pass-b"}
# a's own devices, except that nobody may leave a *retained* message under devices/+/locked/
RULES: list[dict[str, Any]] = [
    {"permission": "deny", "action": "publish", "topic": "devices/+/locked/#", "retain": True},
    *OWN_DEVICES,
]


@pytest.fixture(scope="module")
def accounts_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    path = write_accounts(tmp_path_factory.mktemp("wills") / "accounts.yaml", PASSWORDS, RULES)
    process = BrokerProcess(f"auth:\n  accounts_file: {path}\n")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def open_broker() -> Iterator[BrokerProcess]:
    process = BrokerProcess("mqtt:\n  maximum_qos: 1\n  retain_available: false\n")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def anonymous_broker() -> Iterator[BrokerProcess]:
    process = BrokerProcess()  # the default: anonymous, every topic but `$` allowed
    try:
        yield process
    finally:
        process.stop()


def connect_with_will(
    port: int, will: Will, version: int = MQTT_5, user: str | None = None
) -> Connack | None:
    """CONNECT with ``will`` then drop the socket (a will is due): the CONNACK, or None when
    the broker closed without one."""
    raw = RawClient(port, version=version)
    try:
        raw.send_packet(
            Connect(
                protocol_version=version,
                client_id=f"will-{version}-{will.topic[:20]}",
                keep_alive=30,
                will=will,
                username=user,
                password=PASSWORDS[user].encode() if user else None,
            )
        )
        ack = raw.read_packet()
        assert ack is None or isinstance(ack, Connack), ack
        return ack
    finally:
        raw.close()  # no DISCONNECT: an accepted will is published now


def retained_under(port: int, topic_filter: str, user: str | None = None) -> list[bytes]:
    """Retained messages a fresh subscriber to ``topic_filter`` gets."""
    client = (
        PahoClient(port, "")
        if user is None
        else user_client(port, f"probe-{user}", user, PASSWORDS[user])
    )
    try:
        assert client.connect().reason == 0
        assert client.subscribe(topic_filter, qos=0)[0] in (0, 1, 2)
        found = []
        try:
            while True:
                found.append(client.messages.get(timeout=0.7))
        except queue.Empty:
            pass
        return [m.payload for m in found if m.retain]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("topic", "qos", "retain", "v5", "v311"),
    [
        ("devices/b/cmd", 1, True, 0x87, 5),  # another user's topic
        ("devices/a/locked/x", 0, True, 0x87, 5),  # the ACL's retain condition
        ("$SYS/broker/fake", 0, False, 0x87, 5),  # a `$` topic
        ("devices/a/#", 0, False, 0x90, None),  # a wildcard: 3.1.1 closes without CONNACK
        ("devices/a/+", 0, False, 0x90, None),
    ],
    ids=["other-user", "retain-denied", "dollar", "hash", "plus"],
)
def test_a_will_the_user_may_not_publish_refuses_the_connect(
    accounts_broker: BrokerProcess,
    topic: str,
    qos: int,
    retain: bool,
    v5: int,
    v311: int | None,
) -> None:
    will = Will(topic, b"last words", qos, retain)
    ack = connect_with_will(accounts_broker.port, will, MQTT_5, "a")
    assert ack is not None and (ack.reason_code, ack.session_present) == (v5, False)
    ack = connect_with_will(accounts_broker.port, will, 4, "a")
    if v311 is None:
        assert ack is None
    else:
        assert ack is not None and ack.reason_code == v311


def test_refused_wills_are_never_published_nor_retained(accounts_broker: BrokerProcess) -> None:
    owner = user_client(accounts_broker.port, "b-listens", "b", PASSWORDS["b"])
    try:
        assert owner.connect().reason == 0
        assert owner.subscribe("devices/b/#", qos=1) == [1]
        ack = connect_with_will(accounts_broker.port, Will("devices/b/cmd", b"x", 1, True), 4, "a")
        assert ack is not None and ack.reason_code == 5
        owner.expect_none(1.0)
    finally:
        owner.close()
    assert retained_under(accounts_broker.port, "devices/b/#", "b") == []
    assert retained_under(accounts_broker.port, "devices/a/#", "a") == []


def test_an_allowed_will_is_published(accounts_broker: BrokerProcess) -> None:
    watcher = user_client(accounts_broker.port, "a-listens", "a", PASSWORDS["a"])
    try:
        assert watcher.connect().reason == 0
        assert watcher.subscribe("devices/a/#", qos=1) == [1]
        ack = connect_with_will(
            accounts_broker.port, Will("devices/a/locked/x", b"unretained", 1), MQTT_5, "a"
        )
        assert ack is not None and ack.reason_code == 0
        assert [m.payload for m in watcher.expect(1)] == [b"unretained"]
    finally:
        watcher.close()


@pytest.mark.parametrize(
    ("topic", "v5", "v311"),
    # (U+0000 is refused by the decoder already: 0x81 Malformed Packet)
    [("", 0x90, None), ("$SYS/x", 0x87, 5), ("a/#", 0x90, None), ("a/\x00b", 0x81, None)],
    ids=["empty", "dollar", "wildcard", "nul"],
)
def test_anonymous_wills_follow_the_topic_rules(
    anonymous_broker: BrokerProcess, topic: str, v5: int, v311: int | None
) -> None:
    will = Will(topic, b"retained will", 0, True)
    ack = connect_with_will(anonymous_broker.port, will, MQTT_5)
    assert ack is not None and ack.reason_code == v5
    ack = connect_with_will(anonymous_broker.port, will, 4)
    assert (ack.reason_code if ack is not None else None) == v311
    assert retained_under(anonymous_broker.port, "#") == []
    assert retained_under(anonymous_broker.port, "$SYS/#") == []


@pytest.mark.parametrize(
    ("qos", "retain", "v5", "v311"),
    [(2, False, 0x9B, 3), (0, True, 0x9A, 3)],
    ids=["qos-not-supported", "retain-not-supported"],
)
def test_wills_beyond_the_servers_limits_are_refused(
    open_broker: BrokerProcess, qos: int, retain: bool, v5: int, v311: int
) -> None:
    will = Will("plain/topic", b"x", qos, retain)
    ack = connect_with_will(open_broker.port, will, MQTT_5)
    assert ack is not None and ack.reason_code == v5
    ack = connect_with_will(open_broker.port, will, 4)
    assert ack is not None and ack.reason_code == v311

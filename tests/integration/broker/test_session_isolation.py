"""A session belongs to the user that created it: another user's CONNECT with its client id
never inherits it, and a resumed session obeys the user's current rules (one node)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts_file import (
    KEEP_300,
    OWN_DEVICES,
    leave_session,
    user_client,
    write_accounts,
)
from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import wait_for
from tests.support.http_probe import metric, wait_port
from tests.support.paho_client import PahoClient
from tests.support.raw_client import RawClient
from xmq.codec.packets import MQTT_5, Connack, Connect, Packet
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration

PASSWORDS = {"a": "pass-a", "b": "pass-b"}


def _broker(accounts: Path, extra: str = "") -> BrokerProcess:
    return BrokerProcess(f"auth:\n  accounts_file: {accounts}\n{extra}")


@pytest.fixture
def accounts(tmp_path: Path) -> Path:
    return write_accounts(tmp_path / "accounts.yaml", PASSWORDS, OWN_DEVICES)


@pytest.fixture
def broker(accounts: Path) -> Iterator[BrokerProcess]:
    process = _broker(accounts)
    try:
        yield process
    finally:
        process.stop()


def _user(port: int, client_id: str, user: str) -> PahoClient:
    return user_client(port, client_id, user, PASSWORDS[user])


def intrude(port: int, client_id: str, user: str, version: int) -> tuple[Connack, list[Packet]]:
    """A raw CONNECT as ``user`` resuming ``client_id``: its CONNACK and what followed."""
    raw = RawClient(port, version=version)
    try:
        properties = None
        if version == MQTT_5:
            properties = Properties()
            properties.session_expiry_interval = 300
        raw.send_packet(
            Connect(
                protocol_version=version,
                clean_start=False,
                keep_alive=30,
                client_id=client_id,
                properties=properties,
                username=user,
                password=PASSWORDS[user].encode(),
            )
        )
        ack = raw.read_packet()
        assert isinstance(ack, Connack), ack
        after = raw.read_until_closed(timeout=5) if ack.reason_code else []
        return ack, after
    finally:
        raw.close()


@pytest.mark.parametrize(("version", "code"), [(MQTT_5, 0x87), (4, 5)], ids=["v5", "v311"])
def test_another_user_is_refused_and_the_online_owner_is_not_disturbed(
    broker: BrokerProcess, version: int, code: int
) -> None:
    owner = _user(broker.port, "dev-b", "b")
    publisher = _user(broker.port, "pub-b", "b")
    try:
        assert owner.connect(clean_start=True, properties=KEEP_300).reason == 0
        assert owner.subscribe("devices/b/#", qos=1) == [1]
        assert publisher.connect().reason == 0
        ack, after = intrude(broker.port, "dev-b", "a", version)
        assert (ack.reason_code, ack.session_present, after) == (code, False, [])
        assert publisher.publish("devices/b/x", "still yours", qos=1) == 0
        assert [m.payload for m in owner.expect(1)] == [b"still yours"]
        assert owner.disconnects.empty()  # no 0x8E: the owner was never taken over
    finally:
        owner.close()
        publisher.close()


def test_another_user_gets_nothing_of_an_offline_session_and_the_owner_gets_it_all(
    broker: BrokerProcess,
) -> None:
    leave_session(broker.port, "dev-b", "b", PASSWORDS["b"], "devices/b/#")
    publisher = _user(broker.port, "pub-b", "b")
    try:
        assert publisher.connect().reason == 0
        for n in range(3):
            assert publisher.publish(f"devices/b/{n}", f"queued {n}", qos=1) == 0
        for version in (MQTT_5, 4):
            ack, after = intrude(broker.port, "dev-b", "a", version)
            assert ack.reason_code in (0x87, 5) and not ack.session_present and after == []
        again = _user(broker.port, "dev-b", "b")
        try:
            result = again.connect(clean_start=False, properties=KEEP_300)
            assert (result.reason, result.session_present) == (0, True)
            assert sorted(m.payload for m in again.expect(3)) == [
                b"queued 0",
                b"queued 1",
                b"queued 2",
            ]
            assert publisher.publish("devices/b/new", "live", qos=1) == 0
            assert [m.payload for m in again.expect(1)] == [b"live"]
        finally:
            again.close()
    finally:
        publisher.close()


def test_the_clean_start_policy_gives_the_other_user_a_clean_session(accounts: Path) -> None:
    process = _broker(accounts, "  foreign_session: clean_start\n")
    owner = _user(process.port, "dev-b", "b")
    intruder = _user(process.port, "dev-b", "a")
    try:
        assert owner.connect(clean_start=True, properties=KEEP_300).reason == 0
        assert owner.subscribe("devices/b/#", qos=1) == [1]
        result = intruder.connect(clean_start=False, properties=KEEP_300)
        assert (result.reason, result.session_present) == (0, False)
        assert owner.disconnects.get(timeout=10).reason == 0x8E
        publisher = _user(process.port, "pub-b", "b")
        assert publisher.connect().reason == 0
        # 0x10 No matching subscribers: b's subscription was not inherited
        assert publisher.publish("devices/b/x", "not for a", qos=1) == 0x10
        intruder.expect_none(0.5)
        publisher.close()
    finally:
        owner.close()
        intruder.close()
        process.stop()


def test_anonymous_is_an_identity_of_its_own(tmp_path: Path) -> None:
    accounts = write_accounts(tmp_path / "accounts.yaml", PASSWORDS, None, allow_anonymous=True)
    process = _broker(accounts)
    try:
        anonymous = PahoClient(process.port, "shared-id")
        assert anonymous.connect(clean_start=True, properties=KEEP_300).reason == 0
        anonymous.disconnect()
        ack, _ = intrude(process.port, "shared-id", "a", MQTT_5)
        assert ack.reason_code == 0x87
        again = PahoClient(process.port, "shared-id")
        result = again.connect(clean_start=False, properties=KEEP_300)
        assert (result.reason, result.session_present) == (0, True)
        again.close()
    finally:
        process.stop()


def test_rules_revoked_while_offline_apply_to_the_resumed_session(
    broker: BrokerProcess, accounts: Path
) -> None:
    leave_session(broker.port, "dev-b", "b", PASSWORDS["b"], "devices/b/#")
    publisher = _user(broker.port, "pub-b", "b")
    try:
        assert publisher.connect().reason == 0
        assert publisher.publish("devices/b/secret", "queued before the change", qos=1) == 0
        publisher.disconnect()
        # b may now use devices/b/public/# only: devices/b/# (and what it queued) is revoked
        narrowed = [{"permission": "allow", "action": "both", "topic": "devices/%u/public/#"}]
        write_accounts(accounts, PASSWORDS, narrowed)
        os.kill(broker.proc.pid, signal.SIGHUP)
        wait_for(lambda: "accounts file" in broker.log(), 10, "the accounts file reloaded")
        metrics = wait_port(broker, "metrics")
        again = _user(broker.port, "dev-b", "b")
        result = again.connect(clean_start=False, properties=KEEP_300)
        assert (result.reason, result.session_present) == (0, True)
        again.expect_none(1.0)  # the queued message is dropped, not delivered
        publisher = _user(broker.port, "pub-b2", "b")
        assert publisher.connect().reason == 0
        # 0x10 No matching subscribers: devices/b/# was removed, it covers this topic no more
        assert publisher.publish("devices/b/public/x", "allowed topic", qos=1) == 0x10
        assert again.subscribe("devices/b/public/#", qos=1) == [1]
        assert publisher.publish("devices/b/public/y", "subscribed again", qos=1) == 0
        assert [m.payload for m in again.expect(1)] == [b"subscribed again"]
        assert metric(metrics, "xmq_subscriptions_revoked_total") == 1
        dropped = 'reason="acl_revoked"'
        assert metric(metrics, "xmq_messages_dropped_by_reason_total", dropped) == 1
        again.close()
    finally:
        publisher.close()

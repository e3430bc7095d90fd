"""Authentication through the broker: accounts file, reason codes, SCRAM-SHA-256 exchange."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from xmq.auth.scram import ScramClient
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password
from xmq.codec.packets import (
    Auth,
    Connack,
    Connect,
    Puback,
    Publish,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties

FAST = HashPolicy(pbkdf2_iterations=1000, scram_iterations=1000)


@pytest.fixture(scope="module")
def accounts_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    path: Path = tmp_path_factory.mktemp("accounts") / "accounts.yaml"
    users = {
        "alice": {
            "password": hash_password("wonderland", FAST),
            "scram": derive_scram_credentials("wonderland", iterations=1000).encode(),
        },
        "mallory": {"password": hash_password("secret", FAST), "enabled": False},
    }
    acl = [
        {"permission": "allow", "action": "both", "topic": "devices/%u/#"},
        {"permission": "allow", "action": "subscribe", "topic": "public/#"},
    ]
    path.write_text(yaml.safe_dump({"allow_anonymous": False, "users": users, "acl": acl}))
    process = BrokerProcess(f"auth:\n  accounts_file: {path}\n")
    try:
        yield process
    finally:
        process.stop()


def _connect(port: int, version: int, **kwargs: object) -> Connack:
    raw = RawClient(port, version=version)
    try:
        raw.send_packet(Connect(protocol_version=version, client_id="c1", **kwargs))  # type: ignore[arg-type]
        ack = raw.read_packet()
        assert isinstance(ack, Connack)
        return ack
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("username", "password", "v5", "v311"),
    [
        ("alice", b"wonderland", 0x00, 0x00),
        ("alice", b"wrong", 0x86, 0x04),
        ("nobody", b"x", 0x86, 0x04),
        ("mallory", b"secret", 0x87, 0x05),
        (None, None, 0x86, 0x04),
    ],
    ids=["good", "wrong-password", "unknown-user", "disabled", "anonymous"],
)
def test_connect_reason_codes(
    accounts_broker: BrokerProcess,
    username: str | None,
    password: bytes | None,
    v5: int,
    v311: int,
) -> None:
    port = accounts_broker.port
    assert _connect(port, 5, username=username, password=password).reason_code == v5
    assert _connect(port, 4, username=username, password=password).reason_code == v311


def test_acl_on_publish_and_subscribe(accounts_broker: BrokerProcess) -> None:
    raw = RawClient(accounts_broker.port)
    try:
        raw.send_packet(Connect(client_id="alice-1", username="alice", password=b"wonderland"))
        assert isinstance(raw.read_packet(), Connack)
        raw.send_packet(
            Subscribe(
                1,
                [
                    SubscriptionRequest("devices/alice/#", 1),
                    SubscriptionRequest("devices/bob/#", 1),
                    SubscriptionRequest("public/news", 1),
                ],
            )
        )
        ack = raw.read_packet()
        assert isinstance(ack, Suback) and ack.reason_codes == [1, 0x87, 1]
        raw.send_packet(Publish("devices/alice/t", b"ok", qos=1, packet_id=2))
        raw.send_packet(Publish("public/news", b"no", qos=1, packet_id=3))
        packets = [raw.read_packet() for _ in range(3)]
        acks = {p.packet_id: p.reason_code for p in packets if isinstance(p, Puback)}
        assert acks == {2: 0, 3: 0x87}
        [echo] = [p for p in packets if isinstance(p, Publish)]
        assert echo.payload == b"ok"
    finally:
        raw.close()


def _scram_connect(port: int, password: str) -> tuple[RawClient, Connack | Auth | None]:
    client = ScramClient("alice", password)
    raw = RawClient(port)
    props = Properties()
    props.authentication_method = "SCRAM-SHA-256"
    props.authentication_data = client.client_first()
    raw.send_packet(Connect(client_id="alice-scram", properties=props))
    challenge = raw.read_packet()
    assert isinstance(challenge, Auth) and challenge.reason_code == 0x18
    assert challenge.properties is not None and challenge.properties.authentication_data
    final = Properties()
    final.authentication_method = "SCRAM-SHA-256"
    final.authentication_data = client.client_final(challenge.properties.authentication_data)
    raw.send_packet(Auth(0x18, final))
    answer = raw.read_packet()
    if isinstance(answer, Connack) and answer.reason_code == 0:
        assert answer.properties is not None and answer.properties.authentication_data
        client.verify_server_final(answer.properties.authentication_data)
    assert answer is None or isinstance(answer, Connack | Auth)
    return raw, answer


def test_scram_sha256_enhanced_authentication(accounts_broker: BrokerProcess) -> None:
    raw, answer = _scram_connect(accounts_broker.port, "wonderland")
    try:
        assert isinstance(answer, Connack) and answer.reason_code == 0
    finally:
        raw.close()
    raw, answer = _scram_connect(accounts_broker.port, "not-it")
    try:
        assert isinstance(answer, Connack) and answer.reason_code == 0x86
    finally:
        raw.close()


def test_unknown_authentication_method(accounts_broker: BrokerProcess) -> None:
    props = Properties()
    props.authentication_method = "KERBEROS"
    assert _connect(accounts_broker.port, 5, properties=props).reason_code == 0x8C


def _auth(reason: int, data: bytes) -> Auth:
    props = Properties()
    props.authentication_method = "SCRAM-SHA-256"
    props.authentication_data = data
    return Auth(reason, props)


def test_reauthentication(accounts_broker: BrokerProcess) -> None:
    raw, answer = _scram_connect(accounts_broker.port, "wonderland")
    try:
        assert isinstance(answer, Connack) and answer.reason_code == 0
        client = ScramClient("alice", "wonderland")
        raw.send_packet(_auth(0x19, client.client_first()))
        challenge = raw.read_packet()
        assert isinstance(challenge, Auth) and challenge.reason_code == 0x18
        assert challenge.properties is not None
        assert challenge.properties.authentication_data is not None
        raw.send_packet(_auth(0x18, client.client_final(challenge.properties.authentication_data)))
        done = raw.read_packet()
        assert isinstance(done, Auth) and done.reason_code == 0
        # still connected and working
        raw.send_packet(Publish("devices/alice/x", b"1", qos=1, packet_id=5))
        assert isinstance(raw.read_packet(), Puback)
    finally:
        raw.close()

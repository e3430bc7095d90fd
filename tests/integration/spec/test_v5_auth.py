"""MQTT 5.0 enhanced authentication (section 4.12, AUTH) with SCRAM-SHA-256 on a raw socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from xmq.auth.scram import ScramClient
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password
from xmq.codec.packets import Auth, Connack, Connect, Disconnect, Packet
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration

METHOD = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    fast = HashPolicy(pbkdf2_iterations=1000, scram_iterations=512)
    accounts = {
        "users": {
            "alice": {
                "password": hash_password("wonderland", fast),
                "scram": derive_scram_credentials("wonderland", iterations=512).encode(),
            }
        },
        "acl": [{"permission": "allow", "action": "both", "topic": "#"}],
    }
    path = Path(tmp_path_factory.mktemp("accounts")) / "accounts.yaml"
    path.write_text(yaml.safe_dump(accounts))
    process = BrokerProcess(f"auth: {{accounts_file: {path}}}\n")
    try:
        yield process
    finally:
        process.stop()


def _exchange(raw: RawClient, password: str, first: Connect | Auth) -> tuple[Auth, Packet | None]:
    """One SCRAM exchange started by ``first``: the server's AUTH 0x18 and its final answer."""
    scram = ScramClient("alice", password)
    assert first.properties is not None
    first.properties.authentication_data = scram.client_first()
    raw.send_packet(first)
    challenge = raw.read_packet()
    assert isinstance(challenge, Auth) and challenge.properties is not None, challenge
    assert challenge.properties.authentication_data is not None
    final = scram.client_final(challenge.properties.authentication_data)
    raw.send_packet(Auth(0x18, Properties(authentication_method=METHOD, authentication_data=final)))
    return challenge, raw.read_packet()


def _connect(client_id: str) -> Connect:
    return Connect(client_id=client_id, properties=Properties(authentication_method=METHOD))


@pytest.mark.spec("5:MQTT-4.12.0-2", "5:MQTT-4.12.0-5", "5:MQTT-3.15.2-1")
def test_scram_exchange_repeats_the_method(scram_broker: BrokerProcess, uid: str) -> None:
    raw = RawClient(scram_broker.port)
    try:
        challenge, ack = _exchange(raw, "wonderland", _connect(uid))
        assert challenge.reason_code == 0x18
        assert challenge.properties is not None
        assert challenge.properties.authentication_method == METHOD
        assert isinstance(ack, Connack) and ack.reason_code == 0
        assert ack.properties is not None and ack.properties.authentication_method == METHOD
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.12.0-4", "5:MQTT-3.2.2-7")
def test_a_failed_exchange_is_refused_and_closed(scram_broker: BrokerProcess, uid: str) -> None:
    raw = RawClient(scram_broker.port)
    try:
        _, ack = _exchange(raw, "not-the-password", _connect(uid))
        assert isinstance(ack, Connack) and ack.reason_code >= 0x80
        assert raw.read_until_closed() == []
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.12.1-2", "5:MQTT-4.12.0-5")
def test_failed_reauthentication_closes(scram_broker: BrokerProcess, uid: str) -> None:
    raw = RawClient(scram_broker.port)
    try:
        _, ack = _exchange(raw, "wonderland", _connect(uid))
        assert isinstance(ack, Connack) and ack.reason_code == 0
        again = Auth(0x19, Properties(authentication_method=METHOD))
        challenge, answer = _exchange(raw, "wrong", again)
        assert challenge.properties is not None
        assert challenge.properties.authentication_method == METHOD
        packets = [answer, *raw.read_until_closed()]
        assert isinstance(packets[0], Disconnect) and packets[0].reason_code == 0x87
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.15.2-2", "5:MQTT-3.15.2-3")
def test_auth_packets_carry_no_reason_string_or_user_properties(
    scram_broker: BrokerProcess, uid: str
) -> None:
    """A client that asked for problem information, with a small Maximum Packet Size: the
    server's AUTH packets (the challenge, a re-authentication's success) fit it and carry
    neither a Reason String nor User Properties (the properties that must be left out
    rather than exceed it)."""
    raw = RawClient(scram_broker.port)
    try:
        connect = Connect(
            client_id=uid,
            properties=Properties(
                authentication_method=METHOD, maximum_packet_size=200, request_problem_information=1
            ),
        )
        challenge, ack = _exchange(raw, "wonderland", connect)
        assert isinstance(ack, Connack) and ack.reason_code == 0
        again, success = _exchange(
            raw, "wonderland", Auth(0x19, Properties(authentication_method=METHOD))
        )
        assert isinstance(success, Auth) and success.reason_code == 0
        for auth in (challenge, again, success):
            assert auth.properties is not None
            assert auth.properties.reason_string is None
            assert not auth.properties.user_properties
    finally:
        raw.close()

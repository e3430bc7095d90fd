"""``Connect`` and ``Will`` (``codec.connect_packet``, compiled, re-exported by ``codec.packets``)
and ``Credentials`` / ``AuthDecision`` (``core.auth_records``, re-exported by
``core.auth_ports``) keep the records' API: keyword arguments and defaults, comparison by
value, unhashable when mutable, a repr naming the fields (the password of ``Credentials``
never shown)."""

from __future__ import annotations

import pytest

from xmq.codec import connect_packet, packets
from xmq.codec.packets import Connect, PacketType, Will
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.core import auth_ports, auth_records
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator, AuthDecision, Credentials


def test_the_ports_and_packets_re_export_the_compiled_records() -> None:
    assert packets.Connect is connect_packet.Connect and packets.Will is connect_packet.Will
    assert auth_ports.AuthDecision is auth_records.AuthDecision
    assert auth_ports.Credentials is auth_records.Credentials


def test_connect_defaults_keywords_and_packet_type() -> None:
    connect = Connect(client_id="a", keep_alive=30)
    assert (connect.protocol_name, connect.protocol_version, connect.clean_start) == (
        "MQTT",
        5,
        True,
    )
    assert (connect.properties, connect.will, connect.username, connect.password) == (None,) * 4
    assert Connect.packet_type == connect.packet_type == PacketType.CONNECT


def test_connect_compares_by_value_and_round_trips() -> None:
    will = Will("gone/a", b"bye", qos=1, retain=True)
    connect = Connect("MQTT", 4, False, 60, "a", None, will, "user", b"pw")
    assert connect == Connect(
        "MQTT", 4, False, 60, "a", None, Will("gone/a", b"bye", 1, True), "user", b"pw"
    )
    assert connect != Connect("MQTT", 4, False, 60, "b", None, will, "user", b"pw")
    assert connect != object()
    with pytest.raises(TypeError):
        hash(connect)
    decoded = PacketReader(1 << 20).feed(encode(connect, 4), 8)
    assert decoded == [connect]
    assert "client_id='a'" in repr(connect) and "will=Will(" in repr(connect)


def test_auth_decision_keywords_equality_and_repr() -> None:
    decision = AuthDecision(0x86, reason_string="wrong password")
    assert (decision.username, decision.groups, decision.ok) == (None, (), False)
    assert decision == AuthDecision(0x86, None, (), "wrong password")
    assert decision != AuthDecision(0x86, reason_string="other")
    assert AuthDecision(0, username="u", groups=("g",)).ok
    assert "reason_string='wrong password'" in repr(decision)


def test_credentials_ask_a_lazy_peer_once_and_never_show_the_password() -> None:
    asked: list[int] = []

    def peer() -> str:
        asked.append(1)
        return "10.0.0.1:4000"

    credentials = Credentials("c", "u", b"secret", peer, 5)
    assert credentials.peer == credentials.peer == "10.0.0.1:4000"
    assert asked == [1]
    assert "secret" not in repr(credentials)


def test_every_anonymous_login_gets_the_same_accepting_decision() -> None:
    authenticator = AnonymousAuthenticator()
    first = authenticator.decide(Credentials("a", None, None, "h:1", 5))
    second = authenticator.decide(Credentials("b", None, None, "h:2", 5))
    assert first is second and first == AuthDecision(0)
    named = authenticator.decide(Credentials("c", "bob", None, "h:3", 5))
    assert named == AuthDecision(0, "bob")
    refused = AnonymousAuthenticator(allow_anonymous=False).decide(
        Credentials("d", None, None, "h:4", 5)
    )
    assert refused.reason_code == 0x86
    assert AllowAll().acl_now(first, "a").can_subscribe("x", 0)

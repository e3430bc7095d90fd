from __future__ import annotations

import itertools

import pytest

from xmq.codec.packets import Connect, Will
from xmq.codec.properties import Properties
from xmq.protocol.connect_terms import (
    SESSION_NEVER_EXPIRES,
    ConnectRefused,
    ServerLimits,
    connack_properties,
    negotiate_connect,
)

_ids = itertools.count()


def _new_id() -> str:
    return f"auto-{next(_ids)}"


def _props(**values: int | str) -> Properties:
    props = Properties()
    for name, value in values.items():
        setattr(props, name, value)
    return props


def test_mqtt5_defaults() -> None:
    terms = negotiate_connect(Connect(client_id="c", keep_alive=30), ServerLimits(), _new_id)
    assert (terms.client_id, terms.client_id_assigned) == ("c", False)
    assert terms.session_expiry_s == 0
    assert terms.client_receive_maximum == 65535
    assert terms.client_topic_alias_maximum == 0
    assert terms.keep_alive_s == 30 and terms.server_keep_alive_s is None


def test_mqtt5_client_limits_are_read() -> None:
    props = _props(
        session_expiry_interval=120,
        receive_maximum=10,
        maximum_packet_size=500,
        topic_alias_maximum=3,
        request_problem_information=0,
    )
    terms = negotiate_connect(Connect(client_id="c", properties=props), ServerLimits(), _new_id)
    assert terms.session_expiry_s == 120
    assert terms.client_receive_maximum == 10
    assert terms.client_max_packet_size == 500
    assert terms.client_topic_alias_maximum == 3
    assert terms.request_problem_information is False


def test_empty_client_id_is_assigned_in_mqtt5() -> None:
    terms = negotiate_connect(Connect(client_id="", clean_start=False), ServerLimits(), _new_id)
    assert terms.client_id_assigned and terms.client_id.startswith("auto-")
    props = connack_properties(terms, ServerLimits(), None)
    assert props.assigned_client_identifier == terms.client_id


@pytest.mark.parametrize(
    ("connect", "code"),
    [
        (Connect(protocol_version=4, client_id="", clean_start=False), 0x85),
        (Connect(protocol_name="MQIsdp", protocol_version=3, client_id=""), 0x85),
        (Connect(protocol_name="MQIsdp", protocol_version=3, client_id="x" * 24), 0x85),
        (Connect(client_id="c", will=Will("w", b"", qos=2)), 0x9B),
        (Connect(client_id="c", will=Will("w", b"", retain=True)), 0x9A),
        (Connect(client_id="c", will=Will("w/+", b"")), 0x90),
        (Connect(client_id="c", will=Will("#", b"")), 0x90),
        (Connect(client_id="c", will=Will("", b"")), 0x90),
        (Connect(protocol_version=4, client_id="c", will=Will("w/#", b"")), 0x82),
    ],
    ids=[
        "v311-empty-persistent",
        "v31-empty",
        "v31-too-long",
        "will-qos",
        "will-retain",
        "will-topic-plus",
        "will-topic-hash",
        "will-topic-empty",
        "v311-will-topic-wildcard",
    ],
)
def test_refusals(connect: Connect, code: int) -> None:
    limits = ServerLimits(maximum_qos=1, retain_available=False)
    with pytest.raises(ConnectRefused) as refused:
        negotiate_connect(connect, limits, _new_id)
    assert refused.value.reason_code == code


def test_mqtt311_session_expiry_follows_clean_session() -> None:
    clean = negotiate_connect(Connect(protocol_version=4, client_id="c"), ServerLimits(), _new_id)
    kept = negotiate_connect(
        Connect(protocol_version=4, client_id="c", clean_start=False), ServerLimits(), _new_id
    )
    assert clean.session_expiry_s == 0
    assert kept.session_expiry_s == SESSION_NEVER_EXPIRES


def test_server_keep_alive_and_expiry_clamp() -> None:
    limits = ServerLimits(max_keepalive_s=20, max_session_expiry_s=100)
    props = _props(session_expiry_interval=5000)
    terms = negotiate_connect(
        Connect(client_id="c", keep_alive=0, properties=props), limits, _new_id
    )
    assert terms.keep_alive_s == 20 and terms.server_keep_alive_s == 20
    assert terms.session_expiry_s == 100
    ack = connack_properties(terms, limits, 5000)
    assert ack.server_keep_alive == 20
    assert ack.session_expiry_interval == 100

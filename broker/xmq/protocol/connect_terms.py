"""CONNECT negotiation: what a client asked for, what the server grants (sans-IO).

``negotiate_connect`` applies the specification's CONNECT rules and the server's limits and
returns ``ConnectTerms``; ``connack_properties`` says what the server tells an MQTT 5 client.
Refusals raise ``ConnectRefused`` carrying the MQTT 5 reason code (the caller maps it to a
3.1.1 return code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xmq.codec.packets import MQTT_3_1, MQTT_5, Connect
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import ReasonCode

SESSION_NEVER_EXPIRES = 0xFFFF_FFFF
CLIENT_ID_MAX_3_1 = 23


class ConnectRefused(Exception):  # noqa: N818 - carries the CONNACK reason, like ProtocolError
    """The CONNECT is refused with ``reason_code`` (an MQTT 5 CONNACK reason)."""

    def __init__(self, reason_code: int, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code


@dataclass(slots=True, frozen=True)
class ServerLimits:
    """The limits the server announces and enforces (from configuration)."""

    max_packet_size: int = 1_048_576
    receive_maximum: int = 1024
    max_keepalive_s: int = 0
    topic_alias_maximum: int = 64
    maximum_qos: int = 2
    retain_available: bool = True
    max_session_expiry_s: int = SESSION_NEVER_EXPIRES
    max_client_id_length: int = 65535
    wildcard_available: bool = True
    shared_available: bool = True
    subscription_ids_available: bool = True


class ConnectTerms:
    """The negotiated parameters of one connection.

    A plain class, not a dataclass: compiled, a dataclass's ``__init__`` is still the one the
    ``dataclasses`` module generates at import (interpreted code), and one is built per CONNECT.
    """

    __slots__ = (
        "authentication_method",
        "clean_start",
        "client_id",
        "client_id_assigned",
        "client_max_packet_size",
        "client_receive_maximum",
        "client_topic_alias_maximum",
        "keep_alive_s",
        "protocol_version",
        "request_problem_information",
        "request_response_information",
        "server_keep_alive_s",
        "session_expiry_s",
    )

    def __init__(
        self,
        protocol_version: int,
        client_id: str,
        client_id_assigned: bool,
        clean_start: bool,
        keep_alive_s: int,
        server_keep_alive_s: int | None,
        session_expiry_s: int,
        client_receive_maximum: int,
        client_max_packet_size: int,
        client_topic_alias_maximum: int,
        request_problem_information: bool,
        request_response_information: bool,
        authentication_method: str | None,
    ) -> None:
        self.protocol_version = protocol_version
        self.client_id = client_id
        self.client_id_assigned = client_id_assigned
        self.clean_start = clean_start
        self.keep_alive_s = keep_alive_s
        self.server_keep_alive_s = server_keep_alive_s
        self.session_expiry_s = session_expiry_s
        self.client_receive_maximum = client_receive_maximum
        self.client_max_packet_size = client_max_packet_size
        self.client_topic_alias_maximum = client_topic_alias_maximum
        self.request_problem_information = request_problem_information
        self.request_response_information = request_response_information
        self.authentication_method = authentication_method

    def __repr__(self) -> str:
        return (
            f"ConnectTerms({self.client_id!r}, v{self.protocol_version}, "
            f"keep alive {self.keep_alive_s} s, expiry {self.session_expiry_s} s)"
        )


def negotiate_connect(
    connect: Connect, limits: ServerLimits, new_client_id: Callable[[], str]
) -> ConnectTerms:
    """Apply CONNECT rules; raise ``ConnectRefused`` when the client cannot be accepted."""
    version = connect.protocol_version
    props = connect.properties if version == MQTT_5 else None
    client_id = connect.client_id
    assigned = False
    if not client_id:
        if version != MQTT_5 and (not connect.clean_start or version == MQTT_3_1):
            raise ConnectRefused(
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                "an empty client id needs clean session (MQTT 3.1.1) or MQTT 5",
            )
        client_id = new_client_id()
        assigned = True
    elif len(client_id) > limits.max_client_id_length or (
        version == MQTT_3_1 and len(client_id) > CLIENT_ID_MAX_3_1
    ):
        raise ConnectRefused(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")

    will = connect.will
    if will is not None:
        if not will.topic or "+" in will.topic or "#" in will.topic:
            # the will topic is a topic name (MQTT-4.7.0-1, MQTT-4.7.3-1): 0x90 in MQTT 5;
            # 3.1.x has no code for it, so it is a violation closed without CONNACK
            invalid = (
                ReasonCode.TOPIC_NAME_INVALID if version == MQTT_5 else ReasonCode.PROTOCOL_ERROR
            )
            raise ConnectRefused(invalid, "the will topic is not a valid topic name")
        if will.qos > limits.maximum_qos:
            raise ConnectRefused(ReasonCode.QOS_NOT_SUPPORTED, "will QoS not supported")
        if will.retain and not limits.retain_available:
            raise ConnectRefused(ReasonCode.RETAIN_NOT_SUPPORTED, "retained will not supported")

    keep_alive = connect.keep_alive
    server_keep_alive: int | None = None
    too_long = keep_alive == 0 or keep_alive > limits.max_keepalive_s
    if limits.max_keepalive_s and too_long and version == MQTT_5:
        keep_alive = server_keep_alive = limits.max_keepalive_s

    if version == MQTT_5:
        expiry = 0
        receive_maximum = 65535
        max_packet = 0
        alias_max = 0
        problem_info = True
        response_info = False
        method: str | None = None
        if props is not None:
            if props.session_expiry_interval is not None:
                expiry = props.session_expiry_interval
            if props.receive_maximum is not None:
                receive_maximum = props.receive_maximum
            if props.maximum_packet_size is not None:
                max_packet = props.maximum_packet_size
            if props.topic_alias_maximum is not None:
                alias_max = props.topic_alias_maximum
            if props.request_problem_information is not None:
                problem_info = bool(props.request_problem_information)
            if props.request_response_information is not None:
                response_info = bool(props.request_response_information)
            method = props.authentication_method
        expiry = min(expiry, limits.max_session_expiry_s)
    else:
        expiry = (
            0 if connect.clean_start else min(SESSION_NEVER_EXPIRES, limits.max_session_expiry_s)
        )
        receive_maximum = 65535
        max_packet = 0
        alias_max = 0
        problem_info = True
        response_info = False
        method = None

    return ConnectTerms(  # positional: keywords cost an argument parse per connect
        version,  # protocol_version
        client_id,
        assigned,  # client_id_assigned
        connect.clean_start,
        keep_alive,  # keep_alive_s
        server_keep_alive,  # server_keep_alive_s
        expiry,  # session_expiry_s
        receive_maximum,  # client_receive_maximum
        max_packet or 268_435_460,  # client_max_packet_size
        alias_max,  # client_topic_alias_maximum
        problem_info,  # request_problem_information
        response_info,  # request_response_information
        method,  # authentication_method
    )


def connack_properties(
    terms: ConnectTerms, limits: ServerLimits, requested_expiry: int | None
) -> Properties:
    """The CONNACK properties an MQTT 5 client gets: our limits and what we changed."""
    props = server_properties(limits)
    if terms.client_id_assigned:
        props.assigned_client_identifier = terms.client_id
    if terms.server_keep_alive_s is not None:
        props.server_keep_alive = terms.server_keep_alive_s
    if requested_expiry is not None and requested_expiry != terms.session_expiry_s:
        props.session_expiry_interval = terms.session_expiry_s
    return props


def connack_is_plain(terms: ConnectTerms, requested_expiry: int | None) -> bool:
    """True when ``connack_properties`` adds nothing to ``server_properties`` for this client
    (the common case: its CONNACK is the same bytes as every other client's)."""
    return (
        not terms.client_id_assigned
        and terms.server_keep_alive_s is None
        and (requested_expiry is None or requested_expiry == terms.session_expiry_s)
    )


def server_properties(limits: ServerLimits) -> Properties:
    """The CONNACK properties that depend only on the server's limits."""
    props = Properties()
    props.receive_maximum = limits.receive_maximum
    props.maximum_packet_size = limits.max_packet_size
    props.topic_alias_maximum = limits.topic_alias_maximum
    if limits.maximum_qos < 2:
        props.maximum_qos = limits.maximum_qos
    if not limits.retain_available:
        props.retain_available = 0
    if not limits.wildcard_available:
        props.wildcard_subscription_available = 0
    if not limits.shared_available:
        props.shared_subscription_available = 0
    if not limits.subscription_ids_available:
        props.subscription_identifier_available = 0
    return props

"""MQTT 5 properties: identifiers, the slotted ``Properties`` record, and which packet may carry
which property (spec §2.2.2.2)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class PropertyId(IntEnum):
    """The 27 MQTT 5 property identifiers."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class PropertyKind(IntEnum):
    """Wire data type of a property value."""

    BYTE = 0
    U16 = 1
    U32 = 2
    VARINT = 3
    STRING = 4
    BINARY = 5
    STRING_PAIR = 6


# id -> (attribute name, wire kind). Subscription Identifier and User Property are the two
# properties that may repeat; their attributes hold lists.
PROPERTY_TABLE: dict[int, tuple[str, PropertyKind]] = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: ("payload_format_indicator", PropertyKind.BYTE),
    PropertyId.MESSAGE_EXPIRY_INTERVAL: ("message_expiry_interval", PropertyKind.U32),
    PropertyId.CONTENT_TYPE: ("content_type", PropertyKind.STRING),
    PropertyId.RESPONSE_TOPIC: ("response_topic", PropertyKind.STRING),
    PropertyId.CORRELATION_DATA: ("correlation_data", PropertyKind.BINARY),
    PropertyId.SUBSCRIPTION_IDENTIFIER: ("subscription_identifiers", PropertyKind.VARINT),
    PropertyId.SESSION_EXPIRY_INTERVAL: ("session_expiry_interval", PropertyKind.U32),
    PropertyId.ASSIGNED_CLIENT_IDENTIFIER: ("assigned_client_identifier", PropertyKind.STRING),
    PropertyId.SERVER_KEEP_ALIVE: ("server_keep_alive", PropertyKind.U16),
    PropertyId.AUTHENTICATION_METHOD: ("authentication_method", PropertyKind.STRING),
    PropertyId.AUTHENTICATION_DATA: ("authentication_data", PropertyKind.BINARY),
    PropertyId.REQUEST_PROBLEM_INFORMATION: ("request_problem_information", PropertyKind.BYTE),
    PropertyId.WILL_DELAY_INTERVAL: ("will_delay_interval", PropertyKind.U32),
    PropertyId.REQUEST_RESPONSE_INFORMATION: ("request_response_information", PropertyKind.BYTE),
    PropertyId.RESPONSE_INFORMATION: ("response_information", PropertyKind.STRING),
    PropertyId.SERVER_REFERENCE: ("server_reference", PropertyKind.STRING),
    PropertyId.REASON_STRING: ("reason_string", PropertyKind.STRING),
    PropertyId.RECEIVE_MAXIMUM: ("receive_maximum", PropertyKind.U16),
    PropertyId.TOPIC_ALIAS_MAXIMUM: ("topic_alias_maximum", PropertyKind.U16),
    PropertyId.TOPIC_ALIAS: ("topic_alias", PropertyKind.U16),
    PropertyId.MAXIMUM_QOS: ("maximum_qos", PropertyKind.BYTE),
    PropertyId.RETAIN_AVAILABLE: ("retain_available", PropertyKind.BYTE),
    PropertyId.USER_PROPERTY: ("user_properties", PropertyKind.STRING_PAIR),
    PropertyId.MAXIMUM_PACKET_SIZE: ("maximum_packet_size", PropertyKind.U32),
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: (
        "wildcard_subscription_available",
        PropertyKind.BYTE,
    ),
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: (
        "subscription_identifier_available",
        PropertyKind.BYTE,
    ),
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: ("shared_subscription_available", PropertyKind.BYTE),
}

#: Byte properties whose only legal values are 0 and 1 (anything else is a Protocol Error).
BOOLEAN_PROPERTIES: frozenset[int] = frozenset(
    {
        PropertyId.PAYLOAD_FORMAT_INDICATOR,
        PropertyId.REQUEST_PROBLEM_INFORMATION,
        PropertyId.REQUEST_RESPONSE_INFORMATION,
        PropertyId.MAXIMUM_QOS,
        PropertyId.RETAIN_AVAILABLE,
        PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
        PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        PropertyId.SHARED_SUBSCRIPTION_AVAILABLE,
    }
)

#: Properties for which the value 0 is a Protocol Error.
NONZERO_PROPERTIES: frozenset[int] = frozenset(
    {
        PropertyId.RECEIVE_MAXIMUM,
        PropertyId.MAXIMUM_PACKET_SIZE,
        PropertyId.SUBSCRIPTION_IDENTIFIER,
    }
)

#: Pseudo packet type used for the will properties inside CONNECT.
WILL_PROPERTIES = 0

_P = PropertyId
_REASON_ONLY = frozenset({_P.REASON_STRING, _P.USER_PROPERTY})

#: Which properties each packet type (1..15, plus WILL_PROPERTIES) may carry.
ALLOWED_PROPERTIES: dict[int, frozenset[int]] = {
    WILL_PROPERTIES: frozenset(
        {
            _P.PAYLOAD_FORMAT_INDICATOR,
            _P.MESSAGE_EXPIRY_INTERVAL,
            _P.CONTENT_TYPE,
            _P.RESPONSE_TOPIC,
            _P.CORRELATION_DATA,
            _P.WILL_DELAY_INTERVAL,
            _P.USER_PROPERTY,
        }
    ),
    1: frozenset(  # CONNECT
        {
            _P.SESSION_EXPIRY_INTERVAL,
            _P.AUTHENTICATION_METHOD,
            _P.AUTHENTICATION_DATA,
            _P.REQUEST_PROBLEM_INFORMATION,
            _P.REQUEST_RESPONSE_INFORMATION,
            _P.RECEIVE_MAXIMUM,
            _P.TOPIC_ALIAS_MAXIMUM,
            _P.USER_PROPERTY,
            _P.MAXIMUM_PACKET_SIZE,
        }
    ),
    2: frozenset(  # CONNACK
        {
            _P.SESSION_EXPIRY_INTERVAL,
            _P.ASSIGNED_CLIENT_IDENTIFIER,
            _P.SERVER_KEEP_ALIVE,
            _P.AUTHENTICATION_METHOD,
            _P.AUTHENTICATION_DATA,
            _P.RESPONSE_INFORMATION,
            _P.SERVER_REFERENCE,
            _P.REASON_STRING,
            _P.RECEIVE_MAXIMUM,
            _P.TOPIC_ALIAS_MAXIMUM,
            _P.MAXIMUM_QOS,
            _P.RETAIN_AVAILABLE,
            _P.USER_PROPERTY,
            _P.MAXIMUM_PACKET_SIZE,
            _P.WILDCARD_SUBSCRIPTION_AVAILABLE,
            _P.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            _P.SHARED_SUBSCRIPTION_AVAILABLE,
        }
    ),
    3: frozenset(  # PUBLISH
        {
            _P.PAYLOAD_FORMAT_INDICATOR,
            _P.MESSAGE_EXPIRY_INTERVAL,
            _P.CONTENT_TYPE,
            _P.RESPONSE_TOPIC,
            _P.CORRELATION_DATA,
            _P.SUBSCRIPTION_IDENTIFIER,
            _P.TOPIC_ALIAS,
            _P.USER_PROPERTY,
        }
    ),
    4: _REASON_ONLY,  # PUBACK
    5: _REASON_ONLY,  # PUBREC
    6: _REASON_ONLY,  # PUBREL
    7: _REASON_ONLY,  # PUBCOMP
    8: frozenset({_P.SUBSCRIPTION_IDENTIFIER, _P.USER_PROPERTY}),  # SUBSCRIBE
    9: _REASON_ONLY,  # SUBACK
    10: frozenset({_P.USER_PROPERTY}),  # UNSUBSCRIBE
    11: _REASON_ONLY,  # UNSUBACK
    12: frozenset(),  # PINGREQ
    13: frozenset(),  # PINGRESP
    14: frozenset(  # DISCONNECT
        {_P.SESSION_EXPIRY_INTERVAL, _P.SERVER_REFERENCE, _P.REASON_STRING, _P.USER_PROPERTY}
    ),
    15: frozenset(  # AUTH
        {_P.AUTHENTICATION_METHOD, _P.AUTHENTICATION_DATA, _P.REASON_STRING, _P.USER_PROPERTY}
    ),
}

PROPERTY_NAMES: tuple[str, ...] = tuple(name for name, _ in PROPERTY_TABLE.values())


class Properties:
    """MQTT 5 properties of one packet; every attribute defaults to None (= absent).

    ``subscription_identifiers`` and ``user_properties`` are lists (the two properties that may
    repeat); user properties keep their order and duplicates.
    """

    __slots__ = PROPERTY_NAMES

    def __init__(
        self,
        *,
        payload_format_indicator: int | None = None,
        message_expiry_interval: int | None = None,
        content_type: str | None = None,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
        subscription_identifiers: list[int] | None = None,
        session_expiry_interval: int | None = None,
        assigned_client_identifier: str | None = None,
        server_keep_alive: int | None = None,
        authentication_method: str | None = None,
        authentication_data: bytes | None = None,
        request_problem_information: int | None = None,
        will_delay_interval: int | None = None,
        request_response_information: int | None = None,
        response_information: str | None = None,
        server_reference: str | None = None,
        reason_string: str | None = None,
        receive_maximum: int | None = None,
        topic_alias_maximum: int | None = None,
        topic_alias: int | None = None,
        maximum_qos: int | None = None,
        retain_available: int | None = None,
        user_properties: list[tuple[str, str]] | None = None,
        maximum_packet_size: int | None = None,
        wildcard_subscription_available: int | None = None,
        subscription_identifier_available: int | None = None,
        shared_subscription_available: int | None = None,
    ) -> None:
        self.payload_format_indicator = payload_format_indicator
        self.message_expiry_interval = message_expiry_interval
        self.content_type = content_type
        self.response_topic = response_topic
        self.correlation_data = correlation_data
        self.subscription_identifiers = subscription_identifiers
        self.session_expiry_interval = session_expiry_interval
        self.assigned_client_identifier = assigned_client_identifier
        self.server_keep_alive = server_keep_alive
        self.authentication_method = authentication_method
        self.authentication_data = authentication_data
        self.request_problem_information = request_problem_information
        self.will_delay_interval = will_delay_interval
        self.request_response_information = request_response_information
        self.response_information = response_information
        self.server_reference = server_reference
        self.reason_string = reason_string
        self.receive_maximum = receive_maximum
        self.topic_alias_maximum = topic_alias_maximum
        self.topic_alias = topic_alias
        self.maximum_qos = maximum_qos
        self.retain_available = retain_available
        self.user_properties = user_properties
        self.maximum_packet_size = maximum_packet_size
        self.wildcard_subscription_available = wildcard_subscription_available
        self.subscription_identifier_available = subscription_identifier_available
        self.shared_subscription_available = shared_subscription_available

    def items(self) -> list[tuple[str, Any]]:
        """(name, value) of every property that is set, in property-id order."""
        pairs = [(name, getattr(self, name)) for name in PROPERTY_NAMES]
        return [(name, value) for name, value in pairs if value is not None]

    def is_empty(self) -> bool:
        """True when no property is set."""
        return all(getattr(self, name) is None for name in PROPERTY_NAMES)

    def copy(self) -> Properties:
        """A copy; the two list attributes are copied too (their items are immutable)."""
        clone = Properties.__new__(Properties)
        for name in PROPERTY_NAMES:
            setattr(clone, name, getattr(self, name))
        if self.subscription_identifiers is not None:
            clone.subscription_identifiers = list(self.subscription_identifiers)
        if self.user_properties is not None:
            clone.user_properties = list(self.user_properties)
        return clone

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Properties):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in PROPERTY_NAMES)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.items())
        return f"Properties({fields})"


_new_properties = Properties.__new__


def blank_properties() -> Properties:
    """``Properties()`` without the keyword-argument overhead (the decoder's hot path)."""
    props: Properties = _new_properties(Properties)
    props.payload_format_indicator = None
    props.message_expiry_interval = None
    props.content_type = None
    props.response_topic = None
    props.correlation_data = None
    props.subscription_identifiers = None
    props.session_expiry_interval = None
    props.assigned_client_identifier = None
    props.server_keep_alive = None
    props.authentication_method = None
    props.authentication_data = None
    props.request_problem_information = None
    props.will_delay_interval = None
    props.request_response_information = None
    props.response_information = None
    props.server_reference = None
    props.reason_string = None
    props.receive_maximum = None
    props.topic_alias_maximum = None
    props.topic_alias = None
    props.maximum_qos = None
    props.retain_available = None
    props.user_properties = None
    props.maximum_packet_size = None
    props.wildcard_subscription_available = None
    props.subscription_identifier_available = None
    props.shared_subscription_available = None
    return props


__all__ = [
    "ALLOWED_PROPERTIES",
    "BOOLEAN_PROPERTIES",
    "NONZERO_PROPERTIES",
    "PROPERTY_NAMES",
    "PROPERTY_TABLE",
    "WILL_PROPERTIES",
    "Properties",
    "PropertyId",
    "blank_properties",
    "PropertyKind",
]

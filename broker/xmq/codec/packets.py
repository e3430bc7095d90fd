"""Slotted MQTT control packet records (MQTT 3.1, 3.1.1 and 5.0).

One class per packet type; fields absent from a protocol version keep their defaults (e.g.
3.1.1 has no properties and no reason codes on PUBACK). ``properties`` is None when a packet
carries none (a decoded MQTT 5 packet with an empty property list also gets None).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, TypeAlias

from xmq.codec.connect_packet import Connect as Connect
from xmq.codec.connect_packet import Will as Will
from xmq.codec.properties import Properties


class PacketType(IntEnum):
    """Control packet types (high nibble of the first byte)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


#: protocol_version values: the CONNECT protocol level byte.
MQTT_3_1 = 3
MQTT_3_1_1 = 4
MQTT_5 = 5
PROTOCOL_NAMES: dict[int, str] = {MQTT_3_1: "MQIsdp", MQTT_3_1_1: "MQTT", MQTT_5: "MQTT"}


@dataclass(slots=True)
class Connack:
    packet_type: ClassVar[int] = PacketType.CONNACK

    session_present: bool = False
    reason_code: int = 0
    properties: Properties | None = None


class Publish:
    """PUBLISH; ``packet_id`` is 0 for QoS 0. In MQTT 5 ``topic`` is "" when only a topic
    alias is sent (resolving aliases is the protocol layer's job).

    Written by hand rather than as a dataclass: it is built once per message on the hot path.
    """

    packet_type: ClassVar[int] = PacketType.PUBLISH

    __slots__ = ("topic", "payload", "qos", "retain", "dup", "packet_id", "properties")

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        dup: bool = False,
        packet_id: int = 0,
        properties: Properties | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.properties = properties

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Publish):
            return NotImplemented
        return (
            self.topic == other.topic
            and self.payload == other.payload
            and self.qos == other.qos
            and self.retain == other.retain
            and self.dup == other.dup
            and self.packet_id == other.packet_id
            and self.properties == other.properties
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Publish(topic={self.topic!r}, payload={self.payload!r}, qos={self.qos!r}, "
            f"retain={self.retain!r}, dup={self.dup!r}, packet_id={self.packet_id!r}, "
            f"properties={self.properties!r})"
        )


@dataclass(slots=True)
class PacketIdAck:
    """Base of PUBACK, PUBREC, PUBREL and PUBCOMP."""

    packet_type: ClassVar[int] = 0

    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class Puback(PacketIdAck):
    packet_type: ClassVar[int] = PacketType.PUBACK


@dataclass(slots=True)
class Pubrec(PacketIdAck):
    packet_type: ClassVar[int] = PacketType.PUBREC


@dataclass(slots=True)
class Pubrel(PacketIdAck):
    packet_type: ClassVar[int] = PacketType.PUBREL


@dataclass(slots=True)
class Pubcomp(PacketIdAck):
    packet_type: ClassVar[int] = PacketType.PUBCOMP


@dataclass(slots=True)
class SubscriptionRequest:
    """One topic filter of a SUBSCRIBE with its subscription options."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    packet_type: ClassVar[int] = PacketType.SUBSCRIBE

    packet_id: int
    subscriptions: list[SubscriptionRequest]
    properties: Properties | None = None


@dataclass(slots=True)
class Suback:
    packet_type: ClassVar[int] = PacketType.SUBACK

    packet_id: int
    reason_codes: list[int]
    properties: Properties | None = None


@dataclass(slots=True)
class Unsubscribe:
    packet_type: ClassVar[int] = PacketType.UNSUBSCRIBE

    packet_id: int
    topic_filters: list[str]
    properties: Properties | None = None


@dataclass(slots=True)
class Unsuback:
    """UNSUBACK; MQTT 3.1.x carries no reason codes (decoded as an empty list)."""

    packet_type: ClassVar[int] = PacketType.UNSUBACK

    packet_id: int
    reason_codes: list[int]
    properties: Properties | None = None


@dataclass(slots=True)
class Pingreq:
    packet_type: ClassVar[int] = PacketType.PINGREQ


@dataclass(slots=True)
class Pingresp:
    packet_type: ClassVar[int] = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    packet_type: ClassVar[int] = PacketType.DISCONNECT

    reason_code: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class Auth:
    packet_type: ClassVar[int] = PacketType.AUTH

    reason_code: int = 0
    properties: Properties | None = None


Packet: TypeAlias = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
    | Auth
)

__all__ = [
    "MQTT_3_1",
    "MQTT_3_1_1",
    "MQTT_5",
    "PROTOCOL_NAMES",
    "Auth",
    "Connack",
    "Connect",
    "Disconnect",
    "Packet",
    "PacketIdAck",
    "PacketType",
    "Pingreq",
    "Pingresp",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "Suback",
    "Subscribe",
    "SubscriptionRequest",
    "Unsuback",
    "Unsubscribe",
    "Will",
]

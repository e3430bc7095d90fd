"""xmq.codec: sans-IO MQTT 3.1 / 3.1.1 / 5.0 codec.

Modules: ``packets`` (records), ``properties`` (MQTT 5 properties), ``reason_codes``,
``errors``, ``reader`` (``PacketReader``, ``decode_packet``), ``writer`` (``encode``,
``encode_publish_parts``). The common names are re-exported here.
"""

from __future__ import annotations

from xmq.codec.errors import (
    MalformedPacket,
    PacketTooLarge,
    PayloadFormatInvalid,
    ProtocolError,
    ProtocolViolation,
    TopicAliasInvalid,
    UnsupportedProtocolVersion,
)
from xmq.codec.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketIdAck,
    PacketType,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Unsuback,
    Unsubscribe,
    Will,
)
from xmq.codec.properties import Properties, PropertyId
from xmq.codec.reader import PacketReader, decode_packet
from xmq.codec.reason_codes import ReasonCode, connack_v311_code, suback_v311_code
from xmq.codec.writer import encode, encode_publish_parts, encode_varint

__all__ = [
    "Auth",
    "Connack",
    "Connect",
    "Disconnect",
    "MalformedPacket",
    "Packet",
    "PacketIdAck",
    "PacketReader",
    "PacketTooLarge",
    "PacketType",
    "PayloadFormatInvalid",
    "Pingreq",
    "Pingresp",
    "Properties",
    "PropertyId",
    "ProtocolError",
    "ProtocolViolation",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "ReasonCode",
    "Suback",
    "Subscribe",
    "SubscriptionRequest",
    "TopicAliasInvalid",
    "Unsuback",
    "Unsubscribe",
    "UnsupportedProtocolVersion",
    "Will",
    "connack_v311_code",
    "decode_packet",
    "encode",
    "encode_publish_parts",
    "encode_varint",
    "suback_v311_code",
]

"""Exceptions raised by the codec.

Only :class:`ProtocolError` subclasses ever escape decoding. Each carries the MQTT 5 reason
code the connection should be closed with (CONNACK before a CONNECT was accepted, DISCONNECT
after; MQTT 3.1.x simply closes).
"""

from __future__ import annotations

import struct
from typing import Any

#: Exceptions that mean "bad bytes" when they come out of decoding; converted to MalformedPacket.
LOW_LEVEL_ERRORS = (struct.error, IndexError, ValueError, OverflowError)


class ProtocolError(Exception):
    """Input that breaks the MQTT rules; ``reason_code`` says how to answer.

    ``protocol_version`` is the version the offending peer speaks when the codec knows it
    (0 when unknown): a failed CONNECT sets it as soon as the protocol level was read, so the
    caller can pick the CONNACK format (MQTT 3.1.x: close without CONNACK).

    ``decoded`` holds the packets ``PacketReader.feed`` completed in the same call before the
    bad one (in order), so the caller may still act on them before closing.
    """

    reason_code: int = 0x80
    protocol_version: int = 0
    decoded: list[Any]

    def __init__(
        self, message: str, reason_code: int | None = None, protocol_version: int | None = None
    ) -> None:
        super().__init__(message)
        self.decoded = []
        if reason_code is not None:
            self.reason_code = reason_code
        if protocol_version is not None:
            self.protocol_version = protocol_version

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class MalformedPacket(ProtocolError):  # noqa: N818 (names fixed by the API)
    """The bytes cannot be parsed per the specification (0x81)."""

    reason_code = 0x81


class ProtocolViolation(ProtocolError):  # noqa: N818 (names fixed by the API)
    """Parsable, but the specification calls it a Protocol Error (0x82)."""

    reason_code = 0x82


class UnsupportedProtocolVersion(ProtocolError):  # noqa: N818 (names fixed by the API)
    """CONNECT with an unknown protocol name or level (0x84; MQTT 3.1.1 return code 1).

    ``protocol_version`` holds the level byte that was received (0 if the name was unknown)
    and ``protocol_name`` the protocol name.
    """

    reason_code = 0x84
    protocol_name: str = ""

    def __init__(
        self,
        message: str,
        reason_code: int | None = None,
        protocol_version: int | None = None,
        protocol_name: str = "",
    ) -> None:
        super().__init__(message, reason_code, protocol_version)
        self.protocol_name = protocol_name


class PacketTooLarge(ProtocolError):  # noqa: N818 (names fixed by the API)
    """The packet exceeds the maximum packet size (0x95)."""

    reason_code = 0x95


class TopicAliasInvalid(ProtocolError):  # noqa: N818 (names fixed by the API)
    """A topic alias is 0, above the maximum, or unknown (0x94)."""

    reason_code = 0x94


class PayloadFormatInvalid(ProtocolError):  # noqa: N818 (names fixed by the API)
    """Payload Format Indicator says UTF-8 but the payload is not (0x99)."""

    reason_code = 0x99


__all__ = [
    "LOW_LEVEL_ERRORS",
    "MalformedPacket",
    "PacketTooLarge",
    "PayloadFormatInvalid",
    "ProtocolError",
    "ProtocolViolation",
    "TopicAliasInvalid",
    "UnsupportedProtocolVersion",
]

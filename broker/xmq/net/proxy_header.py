"""PROXY protocol v1 (text) and v2 (binary) headers, as sent by load balancers (sans-IO).

``parse_proxy_header(data)`` looks at the first bytes of a connection and says whether a
complete header is there, how long it is and which client address it carries.
``header_part(buffered, peeked)`` says how many newly peeked bytes belong to the header, so
the caller (``proxy_accept``) consumes exactly the header's bytes, never one after it.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_PREFIX = b"PROXY "
V1_MAX_LENGTH = 107
V2_HEADER = struct.Struct("!12sBBH")
MAX_HEADER_LENGTH = 16 + 65535


class ProxyHeaderError(ValueError):
    """The connection starts with something that is not a valid PROXY header."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    length: int
    """Bytes of the header (to consume before the client's own bytes)."""
    source: tuple[str, int] | None
    """The real client address; ``None`` for LOCAL / UNKNOWN (health checks of the proxy)."""


def looks_like_proxy_header(data: bytes) -> bool | None:
    """True/False once enough bytes are there to tell, ``None`` while undecided."""
    for prefix in (V1_PREFIX, V2_SIGNATURE):
        common = min(len(data), len(prefix))
        if data[:common] == prefix[:common]:
            if common == len(prefix):
                return True
            return None if common == len(data) else False
    return False


def parse_proxy_header(data: bytes) -> ProxyHeader | None:
    """The header at the start of ``data``, or ``None`` if more bytes are needed."""
    if data.startswith(V2_SIGNATURE[: min(len(data), 12)]) and not data.startswith(b"PROXY"):
        return _parse_v2(data)
    if data.startswith(V1_PREFIX):
        return _parse_v1(data)
    raise ProxyHeaderError("no PROXY protocol header")


def header_part(buffered: bytes, peeked: bytes) -> tuple[int, ProxyHeader | None]:
    """``(n, header)``: the first ``n`` bytes of ``peeked`` (read after the header bytes
    ``buffered``) belong to the header; ``header`` is set once it is complete.

    While the header is incomplete every peeked byte is part of it (a v2 header is longer, a
    v1 line has no CR LF yet, or the bytes are still a prefix of a signature), so they can be
    consumed and the socket waited on again. Raises ``ProxyHeaderError`` for bytes that can't
    be a header.
    """
    data = buffered + peeked
    verdict = looks_like_proxy_header(data)
    if verdict is False:
        raise ProxyHeaderError("no PROXY protocol header")
    if verdict is None:
        return len(peeked), None
    header = parse_proxy_header(data)
    if header is None:
        if len(data) > MAX_HEADER_LENGTH:
            raise ProxyHeaderError("PROXY header too long")
        return len(peeked), None
    return header.length - len(buffered), header


def _parse_v1(data: bytes) -> ProxyHeader | None:
    end = data.find(b"\r\n", 0, V1_MAX_LENGTH + 1)
    if end < 0:
        if len(data) > V1_MAX_LENGTH:
            raise ProxyHeaderError("PROXY v1 line too long")
        return None
    try:
        line = data[:end].decode("ascii")
    except UnicodeDecodeError as error:
        raise ProxyHeaderError("PROXY v1 line is not ASCII") from error
    fields = line.split(" ")
    length = end + 2
    if len(fields) >= 2 and fields[1] == "UNKNOWN":
        return ProxyHeader(length, None)
    if len(fields) != 6 or fields[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"bad PROXY v1 line {line!r}")
    _, family, source, _destination, source_port, _destination_port = fields
    try:
        address = ipaddress.ip_address(source)
        port = int(source_port)
    except ValueError as error:
        raise ProxyHeaderError(f"bad PROXY v1 address in {line!r}") from error
    if (family == "TCP4") != (address.version == 4) or not 0 <= port <= 65535:
        raise ProxyHeaderError(f"bad PROXY v1 address in {line!r}")
    return ProxyHeader(length, (str(address), port))


def _parse_v2(data: bytes) -> ProxyHeader | None:
    if len(data) < V2_HEADER.size:
        return None
    signature, version_command, family_protocol, body_length = V2_HEADER.unpack_from(data)
    if signature != V2_SIGNATURE:
        raise ProxyHeaderError("bad PROXY v2 signature")
    if version_command >> 4 != 2:
        raise ProxyHeaderError(f"PROXY v2 version {version_command >> 4}")
    command = version_command & 0x0F
    length = V2_HEADER.size + body_length
    if len(data) < length:
        return None
    if command == 0:  # LOCAL: the proxy's own connection (health check)
        return ProxyHeader(length, None)
    if command != 1:
        raise ProxyHeaderError(f"PROXY v2 command {command}")
    family = family_protocol >> 4
    body = data[V2_HEADER.size : length]
    if family == 1 and len(body) >= 12:  # AF_INET: src, dst, sport, dport
        source = str(ipaddress.IPv4Address(body[0:4]))
        port = int.from_bytes(body[8:10], "big")
        return ProxyHeader(length, (source, port))
    if family == 2 and len(body) >= 36:  # AF_INET6
        source = str(ipaddress.IPv6Address(body[0:16]))
        port = int.from_bytes(body[32:34], "big")
        return ProxyHeader(length, (source, port))
    return ProxyHeader(length, None)  # AF_UNSPEC / AF_UNIX: keep the socket's address


def encode_v1(source: tuple[str, int], destination: tuple[str, int]) -> bytes:
    """A v1 header (used by tests and tools)."""
    family = "TCP6" if ":" in source[0] else "TCP4"
    return f"PROXY {family} {source[0]} {destination[0]} {source[1]} {destination[1]}\r\n".encode()


def encode_v2(source: tuple[str, int], destination: tuple[str, int]) -> bytes:
    """A v2 PROXY/TCP header (used by tests and tools)."""
    src = ipaddress.ip_address(source[0])
    dst = ipaddress.ip_address(destination[0])
    family = 0x11 if src.version == 4 else 0x21
    body = src.packed + dst.packed + struct.pack("!HH", source[1], destination[1])
    return V2_HEADER.pack(V2_SIGNATURE, 0x21, family, len(body)) + body

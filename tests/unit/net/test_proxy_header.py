"""PROXY protocol v1/v2 header parsing (sans-IO)."""

from __future__ import annotations

import pytest

from xmq.net.proxy_header import (
    V2_SIGNATURE,
    ProxyHeader,
    ProxyHeaderError,
    encode_v1,
    encode_v2,
    header_part,
    looks_like_proxy_header,
    parse_proxy_header,
)

CONNECT_START = b"\x10\x10\x00\x04MQTT"


@pytest.mark.parametrize(
    ("header", "source"),
    [
        (encode_v1(("203.0.113.7", 5555), ("10.0.0.1", 1884)), ("203.0.113.7", 5555)),
        (encode_v1(("2001:db8::7", 40000), ("2001:db8::1", 1884)), ("2001:db8::7", 40000)),
        (encode_v2(("198.51.100.9", 61000), ("10.0.0.1", 1884)), ("198.51.100.9", 61000)),
        (encode_v2(("2001:db8::9", 1), ("2001:db8::1", 1884)), ("2001:db8::9", 1)),
        (b"PROXY UNKNOWN\r\n", None),
        (V2_SIGNATURE + b"\x20\x00\x00\x00", None),  # LOCAL command (health check)
    ],
    ids=["v1-ipv4", "v1-ipv6", "v2-ipv4", "v2-ipv6", "v1-unknown", "v2-local"],
)
def test_headers_are_parsed_and_measured(header: bytes, source: tuple[str, int] | None) -> None:
    assert looks_like_proxy_header(header) is True
    parsed = parse_proxy_header(header + CONNECT_START)
    assert parsed == ProxyHeader(len(header), source)


def test_v2_with_tlvs_skips_them() -> None:
    header = encode_v2(("192.0.2.1", 1000), ("192.0.2.2", 1884))
    tlv = b"\xea\x00\x05vpce1"  # an AWS NLB-style TLV
    body_length = int.from_bytes(header[14:16], "big") + len(tlv)
    with_tlv = header[:14] + body_length.to_bytes(2, "big") + header[16:] + tlv
    assert parse_proxy_header(with_tlv) == ProxyHeader(len(with_tlv), ("192.0.2.1", 1000))


@pytest.mark.parametrize(
    "data",
    [b"PROXY TCP4 1.2.3.4", b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\x01\x02", b"PRO", b"\r\n"],
    ids=["v1-partial", "v2-partial", "prefix-only", "signature-start"],
)
def test_incomplete_headers_ask_for_more(data: bytes) -> None:
    if looks_like_proxy_header(data) is None:
        return  # undecided: the caller waits for more bytes
    assert parse_proxy_header(data) is None


def test_mqtt_bytes_are_not_a_header() -> None:
    assert looks_like_proxy_header(CONNECT_START) is False
    with pytest.raises(ProxyHeaderError):
        parse_proxy_header(CONNECT_START)


@pytest.mark.parametrize(
    "data",
    [
        b"PROXY TCP4 999.1.1.1 10.0.0.1 1 2\r\n",
        b"PROXY TCP4 2001:db8::1 10.0.0.1 1 2\r\n",
        b"PROXY TCP4 1.1.1.1 10.0.0.1 70000 2\r\n",
        b"PROXY UDP4 1.1.1.1 10.0.0.1 1 2\r\n",
        b"PROXY " + b"x" * 120,
        V2_SIGNATURE + b"\x11\x11\x00\x00",  # version 1 in a v2 header
        V2_SIGNATURE + b"\x25\x11\x00\x00",  # unknown command
    ],
    ids=["bad-ip", "family-mismatch", "bad-port", "udp", "too-long", "v2-version", "v2-command"],
)
def test_invalid_headers_are_refused(data: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse_proxy_header(data)


@pytest.mark.parametrize(
    "header",
    [
        encode_v1(("203.0.113.7", 5555), ("10.0.0.1", 1884)),
        encode_v2(("2001:db8::9", 1), ("2001:db8::1", 1884)),
        b"PROXY UNKNOWN\r\n",
    ],
    ids=["v1", "v2", "v1-unknown"],
)
def test_header_part_consumes_exactly_the_header_byte_by_byte(header: bytes) -> None:
    """What the reader consumes from the socket: each byte alone, never one after the header."""
    stream = header + CONNECT_START
    buffered = b""
    found = None
    for at in range(len(stream)):
        count, found = header_part(buffered, stream[at : at + 1])
        buffered += stream[at : at + count]
        if found is not None:
            break
    assert buffered == header
    assert found == parse_proxy_header(header)


def test_header_part_takes_every_peeked_byte_of_an_incomplete_header() -> None:
    header = encode_v2(("192.0.2.1", 1000), ("192.0.2.2", 1884))
    assert header_part(b"", header[:20]) == (20, None)
    count, found = header_part(header[:20], header[20:] + CONNECT_START)
    assert count == len(header) - 20 and found is not None


@pytest.mark.parametrize(
    ("buffered", "peeked"),
    [(b"", CONNECT_START), (b"PRO", b"BE"), (b"PROXY TCP4 " + b"1" * 120, b"1")],
    ids=["mqtt", "not-proxy", "v1-too-long"],
)
def test_header_part_refuses_what_cannot_be_a_header(buffered: bytes, peeked: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        header_part(buffered, peeked)

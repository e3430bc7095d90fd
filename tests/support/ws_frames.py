"""Raw WebSocket bytes for tests: the upgrade request, frames (RFC 6455 §5.2), seeded mutations.

Built by hand rather than with wsproto so a test can send what a conforming client never would:
unmasked frames, reserved opcodes and bits, control frames that are too long or fragmented,
zero-length messages, several frames in one write.
"""

from __future__ import annotations

import random
import socket
import struct

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA


def upgrade_request(path: str = "/mqtt", protocol: str = "mqtt") -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    ).encode()


def frame(
    opcode: int,
    payload: bytes = b"",
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bytes | None = b"\x01\x02\x03\x04",
) -> bytes:
    """One frame as a client sends it (masked unless ``mask`` is ``None``)."""
    first = (0x80 if fin else 0) | (rsv & 0x7) << 4 | opcode & 0xF
    size = len(payload)
    mask_bit = 0x80 if mask is not None else 0
    if size < 126:
        head = bytes((first, mask_bit | size))
    elif size < 65536:
        head = bytes((first, mask_bit | 126)) + struct.pack("!H", size)
    else:
        head = bytes((first, mask_bit | 127)) + struct.pack("!Q", size)
    if mask is None:
        return head + payload
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


def binary(payload: bytes) -> bytes:
    return frame(OP_BINARY, payload)


def read_upgrade_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read the server's HTTP answer; return (status line, bytes that came after its head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], rest


def server_frames(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Split unmasked server frames: ``([(opcode, payload), ...], incomplete rest)``."""
    frames: list[tuple[int, bytes]] = []
    at = 0
    while len(data) - at >= 2:
        opcode = data[at] & 0x0F
        size = data[at + 1] & 0x7F
        start = at + 2
        if size == 126:
            if len(data) - at < 4:
                break
            size = struct.unpack_from("!H", data, start)[0]
            start += 2
        elif size == 127:
            if len(data) - at < 10:
                break
            size = struct.unpack_from("!Q", data, start)[0]
            start += 8
        if len(data) < start + size:
            break
        frames.append((opcode, data[start : start + size]))
        at = start + size
    return frames, data[at:]


def close_code(payload: bytes) -> int:
    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005


def mutation(rng: random.Random) -> bytes:
    """One seeded frame-level mutation: what a broken or hostile client might send."""
    kind = rng.randrange(14)
    payload = rng.randbytes(rng.randrange(0, 40))
    if kind == 0:
        return frame(OP_TEXT, b"hello")
    if kind == 1:
        return frame(OP_TEXT, b"hi") + frame(OP_PING, b"p")
    if kind == 2:
        return frame(rng.choice((3, 4, 5, 6, 7, 0xB, 0xC, 0xF)), payload)  # reserved opcodes
    if kind == 3:
        return frame(OP_BINARY, payload, rsv=rng.randrange(1, 8))
    if kind == 4:
        return frame(OP_BINARY, payload, mask=None)  # a client must mask
    if kind == 5:
        return frame(OP_PING, b"x" * 200)  # control frame over 125 bytes
    if kind == 6:
        return frame(OP_PING, b"p", fin=False)  # fragmented control frame
    if kind == 7:
        return frame(OP_CONTINUATION, payload)  # continuation with nothing to continue
    if kind == 8:
        return frame(OP_BINARY, b"", fin=False) + frame(OP_TEXT, payload)  # interleaved
    if kind == 9:
        return binary(b"") * rng.randrange(1, 5)  # zero-length messages
    if kind == 10:
        return frame(OP_CLOSE, b"\x03\xe8bye") + binary(payload)  # data after a close
    if kind == 11:
        return frame(OP_CLOSE, b"\x00")  # a one-byte close payload is invalid
    if kind == 12:
        return frame(OP_TEXT, b"\xff\xfe")  # invalid UTF-8
    return rng.randbytes(rng.randrange(1, 30))  # garbage


def fuzzed_stream(rng: random.Random, mqtt_bytes: bytes) -> bytes:
    """``mqtt_bytes`` in two binary frames, pings and empty messages, one mutation among them."""
    cut = rng.randrange(len(mqtt_bytes) + 1)
    frames = [binary(mqtt_bytes[:cut]), binary(mqtt_bytes[cut:])]
    if rng.random() < 0.5:
        frames.insert(rng.randrange(3), frame(OP_PING, b"ok"))
    if rng.random() < 0.5:
        frames.insert(rng.randrange(len(frames) + 1), binary(b""))
    if rng.random() < 0.8:
        frames.insert(rng.randrange(len(frames) + 1), mutation(rng))
    return b"".join(frames)


def random_splits(rng: random.Random, data: bytes, most: int = 6) -> list[bytes]:
    """``data`` cut at a few seeded places (reads that end anywhere, mid-frame included)."""
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(most))))
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]

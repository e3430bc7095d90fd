"""The acknowledgement encoders (``puback_bytes`` ... ``pubcomp_bytes``): the spec's bytes, the
same as ``encode`` of the packet record, and what the decoder reads back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from xmq.codec.packets import PacketIdAck, Puback, Pubcomp, Pubrec, Pubrel
from xmq.codec.reader import decode_packet
from xmq.codec.writer import encode, puback_bytes, pubcomp_bytes, pubrec_bytes, pubrel_bytes

Ack = Puback | Pubrec | Pubrel | Pubcomp
KINDS: list[tuple[Callable[[int, int, int], bytes], Callable[[int, int], Ack], int]] = [
    (puback_bytes, Puback, 0x40),
    (pubrec_bytes, Pubrec, 0x50),
    (pubrel_bytes, Pubrel, 0x62),  # PUBREL's fixed-header flags are 0010 (MQTT-3.6.1-1)
    (pubcomp_bytes, Pubcomp, 0x70),
]

_PUBLISH_ACK_REASONS = (0, 0x10, 0x80, 0x97)
_VALID = {0x40: _PUBLISH_ACK_REASONS, 0x50: _PUBLISH_ACK_REASONS, 0x62: (0, 0x92), 0x70: (0, 0x92)}


@pytest.mark.parametrize(("encoder", "record", "first"), KINDS)
@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("packet_id", [1, 0x00FF, 0x0100, 0x1234, 0xFFFF])
@pytest.mark.parametrize("reason", [0, 0x10, 0x80, 0x92, 0x97])
def test_ack_bytes(
    encoder: Callable[[int, int, int], bytes],
    record: Callable[[int, int], Ack],
    first: int,
    version: int,
    packet_id: int,
    reason: int,
) -> None:
    data = encoder(packet_id, reason, version)
    head = bytes((first,)) + packet_id.to_bytes(2, "big")
    if reason and version == 5:  # 3.1.x has no reason code; success is left out (3.4.2.1)
        assert data == head[:1] + b"\x03" + head[1:] + bytes((reason,))
    else:
        assert data == head[:1] + b"\x02" + head[1:]
    assert data == encode(record(packet_id, reason), version)
    if version == 5 and reason not in _VALID[first]:
        return  # not a reason this packet may carry: the decoder refuses it (3.6.2.1, 3.7.2.1)
    decoded = decode_packet(data[0], data[2:], version)
    assert type(decoded) is record
    assert isinstance(decoded, PacketIdAck)
    assert decoded.packet_id == packet_id
    assert decoded.reason_code == (reason if version == 5 else 0)


@pytest.mark.parametrize(("encoder", "record", "first"), KINDS)
@pytest.mark.parametrize("packet_id", [0x10000, -1])
def test_ack_bytes_refuse_an_id_beyond_two_bytes(
    encoder: Callable[[int, int, int], bytes],
    record: Callable[[int, int], Ack],
    first: int,
    packet_id: int,
) -> None:
    with pytest.raises(ValueError):
        encoder(packet_id, 0, 5)


def test_a_success_puback_is_made_once_per_packet_id() -> None:
    """Every success PUBACK of one packet id is one object (its table), for every version,
    and a failure reason (MQTT 5) is not taken from it."""
    for packet_id in (0, 1, 0x1234, 0xFFFF):
        packet = puback_bytes(packet_id, 0, 5)
        assert packet == b"\x40\x02" + packet_id.to_bytes(2, "big")
        assert puback_bytes(packet_id, 0, 4) is packet
        assert puback_bytes(packet_id, 0x10, 3) is packet  # 3.1.x: no reason codes
        assert puback_bytes(packet_id, 0x10, 5) == packet[:1] + b"\x03" + packet[2:] + b"\x10"

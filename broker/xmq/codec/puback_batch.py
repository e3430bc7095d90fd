"""Fast recognition of a read that holds nothing but plain PUBACKs.

Subscribers answer every QoS 1 delivery with a 4-byte PUBACK (``40 02 id id``: success, no
reason code, no properties), so on a fan-out broker most reads are exactly that. Recognising
them with a few C-level slice comparisons skips building a packet object per acknowledgement.
Anything else (another packet, a reason code, a partial packet) returns None and goes through
the full ``PacketReader``.
"""

from __future__ import annotations

from typing import Final

_PUBACK_FIRST: Final = 0x40
_PLAIN_LENGTH: Final = 0x02
"""``Final``: compiled, literals in the code, not two lookups in the module's dict a read."""


def plain_puback_id(data: bytes) -> int:
    """The packet id when ``data`` is exactly one plain PUBACK (four bytes), else 0."""
    if len(data) != 4 or data[0] != _PUBACK_FIRST or data[1] != _PLAIN_LENGTH:
        return 0
    return (data[2] << 8) | data[3]  # (0 too for packet id 0: malformed, the reader says so)


def plain_puback_ids(data: bytes) -> list[int] | None:
    """The packet ids when ``data`` is one or more complete plain PUBACKs, else None."""
    size = len(data)
    if size == 4:  # one PUBACK: the usual read of a point-to-point subscriber
        packet_id = (data[2] << 8) | data[3]
        if data[0] == _PUBACK_FIRST and data[1] == _PLAIN_LENGTH and packet_id:
            return [packet_id]
        return None
    if not size or size & 3 or data[0] != _PUBACK_FIRST:
        return None
    count = size >> 2
    if data[0::4] != b"\x40" * count or data[1::4] != b"\x02" * count:
        return None
    ids = [(data[i] << 8) | data[i + 1] for i in range(2, size, 4)]
    return None if 0 in ids else ids  # packet id 0 is malformed: the reader says so

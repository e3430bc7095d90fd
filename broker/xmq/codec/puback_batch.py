"""Fast recognition of a read that holds nothing but plain PUBACKs.

Subscribers answer every QoS 1 delivery with a 4-byte PUBACK (``40 02 id id``: success, no
reason code, no properties), so on a fan-out broker most reads are exactly that. Recognising
them with a few C-level slice comparisons skips building a packet object per acknowledgement.
Anything else (another packet, a reason code, a partial packet) returns None and goes through
the full ``PacketReader``.
"""

from __future__ import annotations

_PUBACK_FIRST = 0x40
_PLAIN_LENGTH = 0x02


def plain_puback_ids(data: bytes) -> list[int] | None:
    """The packet ids when ``data`` is one or more complete plain PUBACKs, else None."""
    size = len(data)
    if not size or size & 3 or data[0] != _PUBACK_FIRST:
        return None
    count = size >> 2
    if data[0::4] != b"\x40" * count or data[1::4] != b"\x02" * count:
        return None
    return [(data[i] << 8) | data[i + 1] for i in range(2, size, 4)]

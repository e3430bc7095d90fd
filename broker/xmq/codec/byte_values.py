"""Single bytes and small big-endian ``u16`` fields as shared ``bytes`` objects.

``int.to_bytes`` costs ~300 instructions a call in the compiled build (a generic call into
``int``'s method, measured under callgrind); the length fields and one-byte headers of the
node-link frames and message records come from these tables instead (a list index).
"""

from __future__ import annotations

from typing import Final

BYTE: Final[list[bytes]] = [bytes((value,)) for value in range(256)]
"""``BYTE[n]`` is ``bytes((n,))``."""

_SMALL_U16: Final[list[bytes]] = [bytes((0, value)) for value in range(256)]


def u16(value: int) -> bytes:
    """``value`` as a big-endian ``u16`` (``OverflowError`` beyond it, as ``to_bytes``)."""
    if 0 <= value < 256:
        return _SMALL_U16[value]
    return value.to_bytes(2, "big")


_PACKET_IDS: Final[list[bytes]] = [b""] * 0x10000
"""``_PACKET_IDS[n]``: packet id ``n`` in two bytes, made the first time it is asked for (a
list of 65,536 pointers, 512 KiB; each id made is a 2-byte ``bytes`` of 40 bytes more, 2.6 MiB
once every id has been used)."""


def packet_id_bytes(packet_id: int) -> bytes:
    """``packet_id`` as a big-endian ``u16`` (``ValueError`` beyond it): a list index, not
    ``int.to_bytes``, after its first use (the PUBLISH and the acknowledgements of QoS 1/2,
    one or two a message on the point-to-point path)."""
    if packet_id < 0 or packet_id > 0xFFFF:
        raise ValueError(f"packet id {packet_id} does not fit in two bytes")
    value = _PACKET_IDS[packet_id]
    if not value:
        value = packet_id.to_bytes(2, "big")
        _PACKET_IDS[packet_id] = value
    return value

"""Single bytes and big-endian ``u16`` fields as shared ``bytes`` objects.

``int.to_bytes`` costs ~300 instructions a call in the compiled build (a generic call into
``int``'s method, measured under callgrind); the packet ids of the PUBLISH and of the QoS 1/2
acknowledgements, and the length fields and one-byte headers of the node-link frames and
message records, come from these tables instead (a list index). One table for every ``u16``
the broker writes: the client connection's ``write_publish``, ``codec.writer``'s
acknowledgements and ``contract.message_record``'s lengths all use ``u16``.
"""

from __future__ import annotations

from typing import Final

BYTE: Final[list[bytes]] = [bytes((value,)) for value in range(256)]
"""``BYTE[n]`` is ``bytes((n,))``."""

_UNMADE: Final = b""
"""A value of ``_U16`` not made yet (told by identity: compiled, ``not made`` was a call into
``bytes``' truth test, ~30 instructions a packet id)."""
_U16: Final[list[bytes]] = [_UNMADE] * 0x10000
"""``_U16[n]``: ``n`` in two bytes, made the first time it is asked for (a list of 65,536
pointers, 512 KiB; each value made is a 2-byte ``bytes`` of 40 bytes more, 2.6 MiB once every
value has been used)."""


def u16(value: int) -> bytes:
    """``value`` as a big-endian ``u16`` (``ValueError`` beyond it): a list index, not
    ``int.to_bytes``, after its first use (a packet id: the PUBLISH and the acknowledgements of
    QoS 1/2, one or two a message on the point-to-point path; a length)."""
    if value < 0 or value > 0xFFFF:
        raise ValueError(f"{value} does not fit in two bytes")
    made = _U16[value]
    if made is _UNMADE:
        made = value.to_bytes(2, "big")
        _U16[value] = made
    return made

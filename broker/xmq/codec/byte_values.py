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

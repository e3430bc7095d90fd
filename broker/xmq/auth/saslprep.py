"""SASLprep (RFC 4013) for SCRAM passwords and user names, from the stdlib `stringprep` tables."""

from __future__ import annotations

import stringprep
import unicodedata


class SaslPrepError(ValueError):
    """The string contains characters SASLprep prohibits."""


def _is_prohibited(char: str) -> bool:
    return (
        stringprep.in_table_c12(char)  # non-ASCII space (mapped earlier, kept for safety)
        or stringprep.in_table_c21_c22(char)  # control characters
        or stringprep.in_table_c3(char)  # private use
        or stringprep.in_table_c4(char)  # non-character code points
        or stringprep.in_table_c5(char)  # surrogates
        or stringprep.in_table_c6(char)  # inappropriate for plain text
        or stringprep.in_table_c7(char)  # inappropriate for canonical representation
        or stringprep.in_table_c8(char)  # change display properties / deprecated
        or stringprep.in_table_c9(char)  # tagging characters
    )


def saslprep(value: str) -> str:
    """Prepare `value` with the SASLprep profile of stringprep (stored strings: no
    unassigned code points)."""
    if value.isascii() and all(0x20 <= ord(c) < 0x7F for c in value):
        return value  # fast path: printable ASCII maps to itself
    mapped = "".join(
        " " if stringprep.in_table_c12(c) else c for c in value if not stringprep.in_table_b1(c)
    )
    normalized = unicodedata.normalize("NFKC", mapped)
    if not normalized:
        return normalized
    for char in normalized:
        if _is_prohibited(char):
            raise SaslPrepError(f"prohibited character U+{ord(char):04X}")
        if stringprep.in_table_a1(char):
            raise SaslPrepError(f"unassigned code point U+{ord(char):04X}")
    has_randal = any(stringprep.in_table_d1(c) for c in normalized)
    if has_randal:
        if any(stringprep.in_table_d2(c) for c in normalized):
            raise SaslPrepError("mixed bidirectional text")
        if not (stringprep.in_table_d1(normalized[0]) and stringprep.in_table_d1(normalized[-1])):
            raise SaslPrepError("right-to-left text must start and end with a RandAL character")
    return normalized


def scram_password_bytes(password: bytes | str) -> bytes:
    """The octets SCRAM hashes for a password.

    Like PostgreSQL: SASLprep the password when it is valid UTF-8 and SASLprep
    accepts it; otherwise use the raw octets.
    """
    if isinstance(password, str):
        try:
            return saslprep(password).encode()
        except SaslPrepError:
            return password.encode()
    try:
        text = password.decode()
    except UnicodeDecodeError:
        return password
    try:
        return saslprep(text).encode()
    except SaslPrepError:
        return password

from __future__ import annotations

import pytest

from xmq.auth.saslprep import SaslPrepError, saslprep, scram_password_bytes


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("I\u00adX", "IX"),  # soft hyphen mapped to nothing
        ("user", "user"),
        ("USER", "USER"),
        ("\u00aa", "a"),  # NFKC
        ("\u2168", "IX"),  # NFKC
        ("a\u00a0b", "a b"),  # non-ASCII space mapped to space
    ],
    ids=["soft-hyphen", "ascii", "case-kept", "ordinal-a", "roman-nine", "nbsp"],
)
def test_rfc4013_examples(given: str, expected: str) -> None:
    assert saslprep(given) == expected


@pytest.mark.parametrize(
    "given",
    ["\u0007", "\ue000", "\u0627\u0031"],
    ids=["control", "private-use", "bidi-rule"],
)
def test_prohibited(given: str) -> None:
    with pytest.raises(SaslPrepError):
        saslprep(given)


def test_password_bytes_fall_back_to_raw_octets() -> None:
    assert scram_password_bytes(b"\xff\xfe") == b"\xff\xfe"
    assert scram_password_bytes(b"\x07bell") == b"\x07bell"
    assert scram_password_bytes("I\u00adX".encode()) == b"IX"
    assert scram_password_bytes("pencil") == b"pencil"

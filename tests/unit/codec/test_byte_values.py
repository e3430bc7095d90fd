"""The byte tables stand for ``int.to_bytes`` exactly, small values and large."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xmq.codec.byte_values import BYTE, u16


def test_every_single_byte() -> None:
    assert [BYTE[value] for value in range(256)] == [bytes((value,)) for value in range(256)]


@given(st.integers(0, 0xFFFF))
def test_u16_is_to_bytes(value: int) -> None:
    assert u16(value) == value.to_bytes(2, "big")


@pytest.mark.parametrize("value", [0, 1, 255, 256, 0xFFFF])
def test_u16_at_the_table_s_edges(value: int) -> None:
    assert u16(value) == value.to_bytes(2, "big")


def test_every_u16_twice() -> None:
    """Made on first use, then the same object from the table, every value exactly."""
    first = [u16(value) for value in range(0x10000)]
    assert first == [value.to_bytes(2, "big") for value in range(0x10000)]
    assert all(u16(value) is first[value] for value in range(0x10000))


@pytest.mark.parametrize("value", [-1, -0xFFFF, 0x10000, 1 << 64])
def test_u16_refuses_what_does_not_fit(value: int) -> None:
    with pytest.raises(ValueError):
        u16(value)

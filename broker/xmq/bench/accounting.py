"""Loss, duplicate and order accounting per (receiver, publisher).

A receiver is one subscriber, or one shared-subscription group (whose members may live in several
worker processes). Each keeps a bitmap of the sequence numbers it has seen from each publisher:
a set bit seen again is a duplicate, a sequence below the highest seen is out of order, and after
the run every sequence the publisher sent whose bit is still clear is lost. Bitmaps of one
receiver from several processes merge with OR; bits set in both are duplicates across processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class SeqTracker:
    """Sequences seen from one publisher by one receiver (in one process)."""

    __slots__ = ("bits", "highest", "unique", "duplicates", "out_of_order")

    def __init__(self) -> None:
        self.bits = bytearray(64)
        self.highest = -1
        self.unique = 0
        self.duplicates = 0
        self.out_of_order = 0

    def record(self, seq: int) -> bool:
        """Record one arrival; True when it is the first arrival of ``seq``."""
        index = seq >> 3
        bits = self.bits
        if index >= len(bits):
            bits.extend(bytes(index - len(bits) + 1 + len(bits)))
        mask = 1 << (seq & 7)
        byte = bits[index]
        if byte & mask:
            self.duplicates += 1
            return False
        bits[index] = byte | mask
        self.unique += 1
        if seq < self.highest:
            self.out_of_order += 1
        else:
            self.highest = seq
        return True


@dataclass(slots=True)
class TrackerSnapshot:
    """What a worker sends back for one (receiver, publisher): picklable and mergeable."""

    bits: bytes
    unique: int
    duplicates: int
    out_of_order: int

    @classmethod
    def of(cls, tracker: SeqTracker) -> TrackerSnapshot:
        end = (tracker.highest >> 3) + 1 if tracker.highest >= 0 else 0
        return cls(
            bytes(tracker.bits[:end]), tracker.unique, tracker.duplicates, tracker.out_of_order
        )


def _popcount(data: bytes) -> int:
    return int.from_bytes(data, "little").bit_count()


def merge_snapshots(parts: Iterable[TrackerSnapshot]) -> TrackerSnapshot:
    """Merge one receiver's snapshots for one publisher taken in several processes."""
    merged = bytearray()
    duplicates = 0
    out_of_order = 0
    for part in parts:
        duplicates += part.duplicates
        out_of_order += part.out_of_order
        if len(part.bits) > len(merged):
            merged.extend(bytes(len(part.bits) - len(merged)))
        overlap = len(part.bits)
        both = int.from_bytes(merged[:overlap], "little") & int.from_bytes(part.bits, "little")
        duplicates += both.bit_count()
        combined = int.from_bytes(merged[:overlap], "little") | int.from_bytes(part.bits, "little")
        merged[:overlap] = combined.to_bytes(overlap, "little")
    raw = bytes(merged)
    return TrackerSnapshot(raw, _popcount(raw), duplicates, out_of_order)


@dataclass(slots=True)
class DeliveryAccount:
    """Totals over every expected (receiver, publisher) pair."""

    expected: int = 0
    received: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    unexpected: int = 0
    pairs: int = 0
    pairs_with_loss: int = 0

    @property
    def loss_ratio(self) -> float:
        return self.lost / self.expected if self.expected else 0.0


def account(
    expectations: Mapping[int, Iterable[int]],
    sent: Mapping[int, int],
    received: Mapping[tuple[int, int], list[TrackerSnapshot]],
) -> DeliveryAccount:
    """Compare what each receiver should have got with what it got.

    ``expectations``: receiver -> publishers it should hear from; ``sent``: publisher -> number of
    messages sent (sequences 0..n-1); ``received``: (receiver, publisher) -> snapshots.
    """
    result = DeliveryAccount()
    expected_pairs: set[tuple[int, int]] = set()
    for receiver, publishers in expectations.items():
        for publisher in publishers:
            expected_pairs.add((receiver, publisher))
            count = sent.get(publisher, 0)
            result.expected += count
            result.pairs += 1
            parts = received.get((receiver, publisher), [])
            merged = merge_snapshots(parts)
            within = _popcount(_truncate_bits(merged.bits, count))
            extra = merged.unique - within
            result.received += within
            result.unexpected += extra
            result.duplicates += merged.duplicates
            result.out_of_order += merged.out_of_order
            missing = count - within
            result.lost += missing
            if missing:
                result.pairs_with_loss += 1
    for key, parts in received.items():
        if key not in expected_pairs:
            result.unexpected += sum(part.unique for part in parts)
    return result


def _truncate_bits(bits: bytes, count: int) -> bytes:
    """Keep only sequences below ``count``."""
    full, rest = divmod(count, 8)
    head = bits[:full]
    if rest and full < len(bits):
        return head + bytes((bits[full] & ((1 << rest) - 1),))
    return head

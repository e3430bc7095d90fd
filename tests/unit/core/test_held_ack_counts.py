"""The gate's per-connection count of held acks (one connection in a slot, the others in a
dict): each connection's count, pause and resume are its own whichever place it is in."""

from __future__ import annotations

import random

from tests.unit.core.test_held_acks import FakeConn, _conn, _paused
from xmq.codec.packets import Puback
from xmq.core.held_acks import AckGate, HeldAck


def _held(gate: AckGate, fake: FakeConn, packet_id: int) -> HeldAck:
    held = gate.begin(_conn(fake), "pub", 1, packet_id)
    held.hold()  # a record: counted from now
    held.release()  # routing over: the record still holds it
    return held


async def test_connections_counted_in_turn_and_together_keep_their_own_counts() -> None:
    gate = AckGate(3)
    a, b, c = FakeConn(), FakeConn(), FakeConn()
    a1 = _held(gate, a, 1)  # a in the slot
    b1 = _held(gate, b, 1)  # b in the dict
    a1.release()  # the slot is free, b still in the dict
    assert gate.waiting(_conn(a)) == 0 and gate.waiting(_conn(b)) == 1
    a2 = _held(gate, a, 2)  # (not the slot while the dict holds b: a connection in one place)
    b2 = _held(gate, b, 2)
    assert gate.waiting(_conn(a)) == 1 and gate.waiting(_conn(b)) == 2
    b3 = _held(gate, b, 3)
    assert _paused(b) and not _paused(a)  # b at its Receive Maximum
    for held in (b1, b2, b3):
        held.release()
    assert not _paused(b) and gate.waiting(_conn(b)) == 0
    c1 = _held(gate, c, 1)
    a2.release()
    c1.release()
    assert [gate.waiting(_conn(fake)) for fake in (a, b, c)] == [0, 0, 0]
    # each connection's acks, in its order of release
    assert a.link.packets() == [Puback(1), Puback(2)]
    assert b.link.packets() == [Puback(1), Puback(2), Puback(3)]
    assert c.link.packets() == [Puback(1)]
    again = _held(gate, c, 2)  # every count back to 0: the slot is taken again
    assert gate.waiting(_conn(c)) == 1
    again.release()
    assert gate.waiting(_conn(c)) == 0


async def test_random_interleavings_count_like_a_plain_tally() -> None:
    rng = random.Random(15)
    limit = 4
    gate = AckGate(limit)
    fakes = [FakeConn() for _ in range(3)]
    held: list[list[HeldAck]] = [[], [], []]
    next_id = [1, 1, 1]
    for _ in range(2_000):
        n = rng.randrange(3)
        if held[n] and (len(held[n]) >= limit + 1 or rng.random() < 0.5):
            held[n].pop(rng.randrange(len(held[n]))).release()
        else:
            held[n].append(_held(gate, fakes[n], next_id[n]))
            next_id[n] = next_id[n] % 60_000 + 1
        for index, fake in enumerate(fakes):
            assert gate.waiting(_conn(fake)) == len(held[index])
            assert _paused(fake) == (len(held[index]) >= limit)
    assert gate.held == sum(len(acks) for acks in held)


async def test_a_held_ack_made_after_one_is_freed_starts_fresh() -> None:
    gate = AckGate(3)
    fake = FakeConn()
    first = gate.begin(_conn(fake), "pub", 1, 1)
    first.hold()
    first.fail()  # (a failed record: its reason set)
    first.release()
    del first  # compiled: kept for the next one (``free_list_len=1``)
    again = gate.begin(_conn(fake), "other", 1, 2)
    assert (again.pending, again.delivered, again.reason) == (1, 1, 0)
    assert (again.client_id, again.packet_id, again.counted, again.quota) == (
        "other",
        2,
        False,
        False,
    )
    again.routed(1, False)
    assert fake.link.packets() == [Puback(1, 0x80), Puback(2)]

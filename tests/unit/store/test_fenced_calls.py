"""The durable record path's own cost: a one-write ``FENCED_WRITES`` call and an
acknowledgement's ``LREM`` are encoded from templates (each must be byte for byte the generic
encoding of the command, the call that of the contract's layout), a record
leaves no reference cycle behind (the collector has nothing to find), and a run that gets a
new epoch writes under it (the template is made again), on a real Redis."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import RedisServer
from tests.unit.store.test_fenced_records import (  # noqa: F401 - fixtures
    KEYS,
    NODE,
    Hold,
    server,
    started_store,
    sync,
)
from xmq.contract.session_scripts import FencedWrite, fenced_writes
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.session import Session
from xmq.store.batch_entries import CoalescedItem
from xmq.store.fenced_calls import FENCED_COMBINE, FencedCalls
from xmq.store.redis_batcher import script_call
from xmq.store.redis_session_store import RedisSessionStore
from xmq.store.resp_connection import encode_command, encode_lrem_one

QUEUE = KEYS.session_queue("c1")


@pytest.mark.parametrize(
    "writes",
    [
        pytest.param([("r", QUEUE, b"rec\r\n$3\r\n", "", "")], id="record"),
        pytest.param(
            [("r", QUEUE, b"rec", KEYS.session_seen("c1", "b-0/1/f2"), "")], id="forwarded"
        ),
        pytest.param(
            [
                (
                    "r",
                    QUEUE,
                    b"rec",
                    KEYS.session_seen("c1", "i1/q5.0"),
                    KEYS.inbound_marks("i1/q5.0"),
                )
            ],
            id="inbound-message",
        ),
        pytest.param(
            [
                (
                    "c",
                    KEYS.shared_seen("i1/q5.0", "g", "t/#"),
                    "m1",
                    "",
                    KEYS.inbound_marks("i1/q5.0"),
                )
            ],
            id="inbound-claim",
        ),
        pytest.param([("i", KEYS.session_qos2_inbound("c1"), "65535", "", "")], id="inbound-id"),
        pytest.param([("l", QUEUE, b"rec", "", "")], id="removal"),
        pytest.param(
            [("l", QUEUE, b"r1\r\n", "", ""), ("r", QUEUE, b"r2", "", "")],
            id="removal-and-record",
        ),
        pytest.param(
            [("l", KEYS.session_queue("c2"), b"r1", "", ""), ("r", QUEUE, b"r2", "", "")],
            id="removal-and-record-of-two-sessions",
        ),
        pytest.param(
            [
                ("r", QUEUE, b"r1", "", ""),
                ("r", QUEUE, b"r2", KEYS.session_seen("c1", "b/1/f2"), ""),
            ],
            id="two-records-one-forwarded",
        ),
        pytest.param(
            [
                ("l", KEYS.session_queue("c2"), b"r1", "", ""),
                ("r", QUEUE, bytes(range(256)), "", ""),
                ("l", QUEUE, b"r0", "", ""),
                ("c", KEYS.shared_seen("m1", "g", "t/#"), "m2", "", ""),
            ]
            + [("r", KEYS.session_queue(f"c{n}"), b"r", "", "") for n in range(3, 12)],
            id="plain-writes-of-many-sessions",
        ),
        pytest.param(
            [
                ("r", QUEUE, b"r1", "", ""),
                ("i", KEYS.session_qos2_inbound("c1"), "7", "", ""),
                (
                    "r",
                    QUEUE,
                    b"r2",
                    KEYS.session_seen("c1", "i1/q7.1"),
                    KEYS.inbound_marks("i1/q7.1"),
                ),
            ],
            id="three-writes",
        ),
    ],
)
@pytest.mark.parametrize("once", [False, True])
def test_a_call_is_the_generic_encoding_of_the_contract_s_layout(
    writes: list[FencedWrite], once: bool
) -> None:
    calls = FencedCalls(KEYS, NODE, 60_000)
    text, command, payload = calls.combine(writes, once)
    want = script_call(*fenced_writes(KEYS, NODE, writes, 60_000, once))
    assert (text, command, payload) == want
    # the batcher's first send: the same payload, the arguments left out of a one- or
    # two-write call (built again for a retry or a log line)
    text, command, payload = calls.combine(writes, once, True)
    assert (text, payload) == (want[0], want[2])
    plain_pair = len(writes) == 2 and not any(write[3] or write[4] for write in writes)
    assert command == (() if len(writes) == 1 or plain_pair else want[1])


def _ignore(reply: Any) -> None:
    """An item's reply callback (none comes: nothing is sent)."""


@pytest.mark.parametrize(
    "writes",
    [
        pytest.param([("l", QUEUE, b"r1", "", ""), ("r", QUEUE, b"r2", "", "")], id="pair"),
        pytest.param(
            [("l", QUEUE, b"r" * 1023, "", ""), ("r", QUEUE, b"r" * 1024, "", "")],
            id="pair-past-the-length-table",
        ),
        pytest.param([("i", QUEUE, "7", "", ""), ("c", QUEUE, "m1", "", "")], id="pair-of-str"),
        pytest.param(
            [("l", KEYS.session_queue("c2"), b"r1", "", ""), ("r", QUEUE, b"r2", "", "")],
            id="pair-of-two-keys",
        ),
        pytest.param([("r", QUEUE, b"r1", "", "")], id="one"),
        pytest.param(
            [
                ("r", QUEUE, b"r1", "", ""),
                ("r", QUEUE, b"r2", KEYS.session_seen("c1", "b/1/f2"), ""),
            ],
            id="pair-with-a-marker",
        ),
        pytest.param([("r", QUEUE, b"r%d" % n, "", "") for n in range(3)], id="three"),
    ],
)
def test_the_batcher_s_first_send_is_combine_s_bare_form(writes: list[FencedWrite]) -> None:
    calls = FencedCalls(KEYS, NODE, 60_000)
    run: list[CoalescedItem] = [
        (FENCED_COMBINE, calls, write, (write[1],), _ignore) for write in writes
    ]
    want = calls.combine(writes, False, True)
    assert calls.first_send(run) == want
    assert calls.first_send(run) == want  # (a pair's prefix kept from the first time)
    generic = script_call(*fenced_writes(KEYS, NODE, writes, 60_000, False))
    assert (want[0], want[2]) == (generic[0], generic[2])


def test_pairs_of_more_queues_than_kept_are_encoded_alike() -> None:
    calls = FencedCalls(KEYS, NODE, 60_000)
    for n in range(4096 + 10):  # past the kept prefixes: they are made again
        queue = KEYS.session_queue(f"c{n % (4096 + 5)}")
        writes: list[FencedWrite] = [("l", queue, b"a", "", ""), ("r", queue, b"b", "", "")]
        want = script_call(*fenced_writes(KEYS, NODE, writes, 60_000, False))
        assert calls.combine(writes, False, True)[2] == want[2]


@pytest.mark.parametrize("record", [b"", b"r\r\n$1\r\n", bytes(range(256)) * 300])
def test_an_acknowledgement_s_lrem_is_its_generic_encoding(record: bytes) -> None:
    assert encode_lrem_one(QUEUE, record) == encode_command(("LREM", QUEUE, 1, record))


async def _record_one_per_flush(store: RedisSessionStore, session: Session, count: int) -> Hold:
    """``count`` QoS 1 records, each written before the next is made (one call per flush, as
    at a low message rate)."""
    hold = Hold()
    for n in range(count):
        message = Message("t", b"m%d" % n, 1, False, None, "p1", 0.0)
        session.deliver(message, 1, False, (), None, 0.0, DurableContext(hold))
        await asyncio.wait_for(store.flush(), 10)
    return hold


@pytest.mark.integration
@pytest.mark.parametrize("lease_held", [True, False])
async def test_an_acknowledged_record_s_removal_rides_in_the_next_record_s_call(
    server: RedisServer,  # noqa: F811 - the fixture
    sync: redis.Redis,  # noqa: F811 - the fixture
    lease_held: bool,
) -> None:
    sync.delete(QUEUE)
    write_lease(sync, KEYS, *NODE)
    batcher, store, session = await started_store(server, NodeIdentity(*NODE, online=True))
    try:
        await _record_one_per_flush(store, session, 1)
        delivery = session.queue.popleft()
        session.unqueued(delivery)
        assert delivery.qos == 1
        commands = batcher.commands
        store.acknowledged(session, delivery)
        await asyncio.sleep(0.01)
        assert batcher.commands == commands  # the removal waits for the next record
        assert sync.llen(QUEUE) == 1
        if not lease_held:
            drop_lease(sync, KEYS, NODE[0])
        hold = await _record_one_per_flush(store, session, 1)
    finally:
        await batcher.close()
    # one FENCED_WRITES call carried both (and store.flush's PING): no LREM of its own
    assert batcher.commands == commands + 2
    if lease_held:
        assert (hold.released, hold.failed) == (1, 0)
        assert sync.lrange(QUEUE, 0, -1) == [session.queue[0].record]  # the first is gone
    else:  # refused with the batch: the acknowledged record stays (sent again on resume)
        assert (hold.released, hold.failed) == (0, 1)
        assert sync.lrange(QUEUE, 0, -1) == [delivery.record]


@pytest.mark.integration
async def test_a_written_record_leaves_no_garbage_cycle(
    server: RedisServer,  # noqa: F811 - the fixture
    sync: redis.Redis,  # noqa: F811 - the fixture
) -> None:
    write_lease(sync, KEYS, *NODE)
    batcher, store, session = await started_store(server, NodeIdentity(*NODE, online=True))
    await _record_one_per_flush(store, session, 3)  # warm: every lazy structure made
    gc.collect()
    gc.disable()
    try:
        hold = await _record_one_per_flush(store, session, 50)
        found = gc.collect()
    finally:
        gc.enable()
        await batcher.close()
    assert (hold.count, hold.released, hold.failed) == (50, 50, 0)
    assert sync.llen(QUEUE) == 53
    assert found == 0  # nothing per record only the collector could free


@pytest.mark.integration
async def test_a_run_with_a_new_epoch_writes_under_it(
    server: RedisServer,  # noqa: F811 - the fixture
    sync: redis.Redis,  # noqa: F811 - the fixture
) -> None:
    write_lease(sync, KEYS, *NODE)
    identity = NodeIdentity(*NODE, online=True)
    batcher, store, session = await started_store(server, identity)
    try:
        first = await _record_one_per_flush(store, session, 2)
        write_lease(sync, KEYS, NODE[0], NODE[1] + 1)  # the node is back under a new epoch
        identity.epoch = NODE[1] + 1
        second = await _record_one_per_flush(store, session, 2)
    finally:
        await batcher.close()
    assert (first.released, first.failed) == (2, 0)
    assert (second.released, second.failed) == (2, 0)  # not fenced by the old epoch's template
    assert sync.llen(QUEUE) == 4

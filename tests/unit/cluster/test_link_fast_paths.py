"""The cheap paths of a message crossing a node link: frames cut from the read itself, the MQTT 5
wire variant seeded from the record, and the PUBLISH_ACK confirmation without a task when the
store has nothing to write (with one when it has, or when DIRECT messages are held)."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.append_recorder import AppendRecorder
from tests.support.virtual_loop import VirtualLoop
from tests.unit.cluster.test_held_forwarding import Transport
from xmq.cluster import direct_hold
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.direct_hold import POLL_S
from xmq.cluster.link_dispatch import decode_message
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import DurableSub
from xmq.codec.properties import Properties
from xmq.codec.writer import encode_publish_parts
from xmq.contract.message_record import encode_record
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings

# -- frames -----------------------------------------------------------------------------------


def _reference_frame(kind: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return struct.pack(">I", len(body) + 1) + bytes((kind,)) + body


def _reference_split(stream: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos < len(stream):
        (size,) = struct.unpack_from(">I", stream, pos)
        out.append((stream[pos + 4], stream[pos + 5 : pos + 4 + size]))
        pos += 4 + size
    return out


@pytest.mark.parametrize("parts", [(), (b"",), (b"record",), (b"a", b"bc", b"")])
def test_frame_bytes_are_unchanged(parts: tuple[bytes, ...]) -> None:
    assert frames.frame(Kind.PUBLISH, *parts) == _reference_frame(Kind.PUBLISH, *parts)
    assert frames.publish_ack(7) == _reference_frame(Kind.PUBLISH_ACK, (7).to_bytes(8, "big"))


def test_the_per_message_kind_constants_are_their_kinds() -> None:
    assert (frames.PUBLISH, frames.PUBLISH_ACK, frames.PUBLISH_UNKEPT) == (
        Kind.PUBLISH,
        Kind.PUBLISH_ACK,
        Kind.PUBLISH_UNKEPT,
    )


@given(st.binary(max_size=300), st.integers(0, 2**64 - 1))
def test_publish_and_publish_ack_frames_are_the_generic_ones(record: bytes, count: int) -> None:
    assert frames.publish(record) == _reference_frame(Kind.PUBLISH, record)
    assert frames.publish(record, False) == _reference_frame(Kind.PUBLISH_UNKEPT, record)
    assert frames.publish_ack(count) == _reference_frame(Kind.PUBLISH_ACK, count.to_bytes(8, "big"))


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.text(max_size=40))
def test_the_body_reader_reads_what_struct_wrote(u32: int, u64: int, text: str) -> None:
    data = text.encode()
    body = struct.pack(">IQH", u32, u64, len(data)) + data + b"\x07"
    reader = frames.BodyReader(body)
    assert (reader.u32(), reader.u64(), reader.text(), reader.u8()) == (u32, u64, text, 7)
    for cut in range(len(body) - 1):  # every truncation is refused, never misread
        short = frames.BodyReader(body[:cut])
        with pytest.raises(frames.FrameError):
            short.u32(), short.u64(), short.text(), short.u8()


bodies = st.lists(st.tuples(st.integers(1, 12), st.binary(max_size=40)), min_size=1, max_size=8)


@given(bodies, st.lists(st.integers(0, 400), max_size=6))
def test_frames_come_out_whole_and_as_bytes_from_any_split(
    parts: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(_reference_frame(kind, body) for kind, body in parts)
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    decoder = FrameDecoder()
    got: list[tuple[int, bytes]] = []
    for start, stop in zip(points, points[1:], strict=False):
        got.extend(decoder.feed(stream[start:stop]))
    assert got == _reference_split(stream)
    assert all(type(body) is bytes for _, body in got)
    assert decoder.feed(b"") == []


def test_a_bytearray_read_goes_through_the_buffer_and_gives_bytes() -> None:
    stream = frames.publish(b"one") + frames.publish(b"two")
    got = FrameDecoder().feed(bytearray(stream))
    assert got == [(Kind.PUBLISH, b"one"), (Kind.PUBLISH, b"two")]
    assert all(type(body) is bytes for _, body in got)


def test_a_bad_length_in_a_whole_read_is_refused() -> None:
    with pytest.raises(frames.FrameError):
        FrameDecoder().feed(b"\x00\x00\x00\x00\x06")


# -- the wire variant seeded from the record ---------------------------------------------------


def _hub(store: AppendRecorder | None = None) -> ClusterHub:
    return ClusterHub(
        Broker(CoreSettings()),
        NodeIdentity("node-2", 5, online=True),
        store or AppendRecorder(),  # type: ignore[arg-type]
    )


topics = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=90,
)


@given(topics, st.binary(max_size=300), st.integers(0, 2), st.booleans(), st.integers(0, 2))
def test_the_seeded_variant_is_the_encoded_one(
    topic: str, payload: bytes, qos: int, retain: bool, sub_qos: int
) -> None:
    record = encode_record("node-1/3/f9", topic, payload, qos, retain, None, "pub", qos, retain)
    message = decode_message(_hub(), record)[0]
    assert (message.topic, message.payload, message.qos, message.retain) == (
        topic,
        payload,
        qos,
        retain,
    )
    assert message.forward_id == "node-1/3/f9"
    fresh = Message(topic, payload, qos, retain, None, "pub", 0.0)
    for version in (5, 4):
        for flag in (False, True):
            expected = encode_publish_parts(topic, payload, sub_qos, flag, None, version)
            assert message.encode(version, sub_qos, flag) == expected
            assert fresh.encode(version, sub_qos, flag) == expected
        assert message.encode(version, 1, False, (7,)) == fresh.encode(version, 1, False, (7,))


async def test_a_record_with_properties_or_subscription_ids_is_encoded_as_before() -> None:
    props = Properties()
    props.content_type = "text/plain"
    props.message_expiry_interval = 60
    with_props = encode_record("n/1/f1", "t/1", b"x" * 200, 1, False, props, "p", 1, False)
    with_ids = encode_record("n/1/f2", "t/1", b"y", 1, False, None, "p", 1, False, (3,))
    hub = _hub()
    before = hub.broker.now()
    message = decode_message(hub, with_props)[0]
    assert message.expires_at is not None
    assert int(before) + 60 <= message.expires_at <= int(hub.broker.now()) + 60  # whole seconds
    now = message.expires_at - 60
    expected = Properties()
    expected.content_type = "text/plain"
    expected.message_expiry_interval = 60
    assert message.encode(5, 1, False, now=now) == encode_publish_parts(
        "t/1", b"x" * 200, 1, False, expected, 5
    )
    message, qos, retain, ids = decode_message(hub, with_ids)
    assert (qos, retain, ids) == (1, False, (3,))
    assert message.encode(5, 1, False) == encode_publish_parts("t/1", b"y", 1, False, None, 5)


# -- PUBLISH_ACK confirmations ------------------------------------------------------------------


class GatedStore(AppendRecorder):
    """A store whose ``flush`` waits for ``gate`` when one is set (records still unwritten)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Future[None] | None = None
        self.flushes = 0
        self.interrupted: list[str] = []

    def written(self) -> bool:
        return self.gate is None or self.gate.done()

    async def flush(self) -> None:
        self.flushes += 1
        if self.gate is not None:
            try:
                await self.gate
            except BaseException as error:
                self.interrupted.append(type(error).__name__)
                raise


class ClosableTransport(Transport):
    def close(self) -> None:
        pass


def _linked(hub: ClusterHub) -> tuple[PeerLink, Transport]:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello("node-1", 3))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    link._out.clear()  # the snapshot
    transport = ClosableTransport()
    link.transport = transport  # type: ignore[assignment]
    return link, transport


def _publishes(count: int, start: int = 0) -> bytes:
    return b"".join(
        frames.publish(
            encode_record(f"node-1/3/f{n}", "t", b"%d" % n, 1, False, None, "p", 1, False)
        )
        for n in range(start, start + count)
    )


def _acks(link: PeerLink, transport: Transport) -> list[int]:
    sent = FrameDecoder().feed(b"".join([*transport.written, *link._out]))
    return [int.from_bytes(body, "big") for kind, body in sent if kind == Kind.PUBLISH_ACK]


async def test_a_read_is_confirmed_when_it_is_handled_without_a_task() -> None:
    store = GatedStore()
    hub = _hub(store)
    link, transport = _linked(hub)
    tasks = len(asyncio.all_tasks())
    link.data_received(_publishes(3))
    assert _acks(link, transport) == [3]
    assert link._out == []  # written at the end of the read: no callback scheduled for it
    assert len(asyncio.all_tasks()) == tasks
    assert (store.flushes, link.ack_pending, link.ack_due) == (0, False, False)
    for _ in range(3):
        await asyncio.sleep(0)
    link.data_received(_publishes(2, 3))
    for _ in range(3):
        await asyncio.sleep(0)
    assert _acks(link, transport) == [3, 5]
    assert store.flushes == 0  # nothing pending in the store: nothing to wait for


async def test_frames_handled_outside_a_read_are_confirmed_on_the_next_tick() -> None:
    hub = _hub()
    link, transport = _linked(hub)
    body = _publishes(1)[5:]
    hub.handle_frame(link, Kind.PUBLISH, body)
    hub.handle_frame(link, Kind.PUBLISH, body)
    assert _acks(link, transport) == []
    await asyncio.sleep(0)
    assert _acks(link, transport) == [2]
    for _ in range(3):
        await asyncio.sleep(0)
    assert _acks(link, transport) == [2]  # one ack


async def test_the_ack_waits_for_the_store_and_later_frames_get_the_next_one() -> None:
    store = GatedStore()
    hub = _hub(store)
    link, transport = _linked(hub)
    store.gate = asyncio.get_running_loop().create_future()
    link.data_received(_publishes(2))
    link.data_received(_publishes(1, 2))  # while the first confirmation waits
    for _ in range(5):
        await asyncio.sleep(0)
    assert _acks(link, transport) == []
    assert store.flushes == 1
    store.gate.set_result(None)
    for _ in range(5):
        await asyncio.sleep(0)
    assert _acks(link, transport) == [2, 3]
    assert store.flushes == 1  # the later frames' records were written by then: no wait
    assert not link.ack_pending


async def test_the_ack_waits_for_direct_messages_held_for_a_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = VirtualLoop()  # the hold's re-check timer only; the link's on the running loop
    monkeypatch.setattr(direct_hold, "asyncio", SimpleNamespace(get_running_loop=lambda: clock))
    store = GatedStore()
    hub = _hub(store)
    link, transport = _linked(hub)
    hub.broker.claiming["c1"] = 1
    record = encode_record("node-1/3/f1", "t", b"1", 1, False, None, "p", 1, False)
    before = asyncio.all_tasks()
    link.data_received(frames.direct("c1", record))
    confirming = asyncio.all_tasks() - before  # the confirmation waiting for the hold
    assert len(hub.direct) == 1 and len(confirming) == 1
    for _ in range(4):  # re-checks while the claim runs, and the link's turns after each
        clock.advance(POLL_S)
        assert clock.run_turn() == 1
        for _ in range(3):
            await asyncio.sleep(0)
    assert _acks(link, transport) == []
    assert not any(task.done() for task in confirming)
    del hub.broker.claiming["c1"]  # the claim is over (the session went elsewhere)
    clock.advance(POLL_S)
    clock.run_turn()  # the re-check sends it to the store and gives the hold back
    assert len(hub.direct) == 0 and clock.pending() == 0
    async with asyncio.timeout(2):  # the confirmation's next look at the hold (a 5 ms poll)
        await asyncio.wait(confirming)
    assert _acks(link, transport) == [1]
    assert [client for client, _, _ in store.appends] == ["c1"]


async def test_a_closed_link_sends_no_ack() -> None:
    hub = _hub()
    link, transport = _linked(hub)
    hub.handle_frame(link, Kind.PUBLISH, _publishes(1)[5:])
    link.closed = True
    await asyncio.sleep(0)
    assert _acks(link, transport) == []
    assert not link.ack_pending


async def test_stopping_the_hub_cancels_a_confirmation_waiting_for_the_store() -> None:
    store = GatedStore()
    hub = _hub(store)
    link, transport = _linked(hub)
    store.gate = asyncio.get_running_loop().create_future()
    link.data_received(_publishes(1))
    await asyncio.sleep(0)
    await hub.stop()
    for _ in range(3):
        await asyncio.sleep(0)
    assert store.interrupted == ["CancelledError"]  # as if a task had run the flush
    assert _acks(link, transport) == []


async def test_a_link_looks_its_loop_up_once_not_per_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """``asyncio.get_running_loop()`` makes a ``getpid`` system call in Python 3.11: a link's
    per-frame scheduling (its flush, a PUBLISH_ACK for frames handled outside a read) goes
    through the loop it looked up once, not a look-up per frame."""
    hub = _hub()
    link, transport = _linked(hub)
    looked_up: list[asyncio.AbstractEventLoop] = []
    running = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        looked_up.append(running())
        return looked_up[-1]

    monkeypatch.setattr(asyncio, "get_running_loop", counted)
    body = _publishes(1)[5:]
    for _ in range(5):
        hub.handle_frame(link, Kind.PUBLISH, body)  # confirmed on the next tick, then written
        for _ in range(3):
            await asyncio.sleep(0)
    assert _acks(link, transport) == [1, 2, 3, 4, 5]
    assert len(looked_up) <= 1


@pytest.mark.parametrize("size", [0, 1, 253, 254, 255, 256, 70_000])
def test_publish_frames_of_every_size_are_the_generic_ones(size: int) -> None:
    record = b"r" * size
    for kept, kind in ((True, Kind.PUBLISH), (False, Kind.PUBLISH_UNKEPT)):
        assert frames.publish(record, kept) == _reference_frame(kind, record)


# -- the forward's frame built in one piece ------------------------------------------------------


_PROPERTIES = st.none() | st.builds(
    Properties,
    content_type=st.none() | st.text(max_size=20),
    message_expiry_interval=st.none() | st.integers(0, 2**32 - 1),
    user_properties=st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=3),
)


@given(
    st.booleans(),
    st.text(max_size=40),
    st.text(min_size=1, max_size=300),
    st.binary(max_size=400),
    st.integers(0, 2),
    st.booleans(),
    _PROPERTIES,
    st.none() | st.text(max_size=30),
    st.integers(0, 2),
    st.booleans(),
)
def test_the_forward_s_frame_is_publish_of_its_record(
    kept: bool,
    record_id: str,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    properties: Properties | None,
    origin: str | None,
    delivery_qos: int,
    delivery_retain: bool,
) -> None:
    """``publish_record`` (one allocation) is byte for byte ``publish(encode_record(...))``:
    the record layout is ``contract.message_record``'s, however long the frame."""
    record = encode_record(
        record_id, topic, payload, qos, retain, properties, origin, delivery_qos, delivery_retain
    )
    built = frames.publish_record(
        kept,
        record_id.encode(),
        topic,
        payload,
        qos,
        retain,
        properties,
        origin,
        delivery_qos,
        delivery_retain,
    )
    assert built == frames.publish(record, kept)
    assert frames.with_kind(built, not kept) == frames.publish(record, not kept)
    assert frames.with_kind(built, kept) is built


def test_the_forward_s_frame_refuses_what_a_record_cannot_hold() -> None:
    with pytest.raises(ValueError, match="too long"):
        frames.publish_record(True, b"i" * 256, "t", b"", 0, False, None, None, 0, False)
    with pytest.raises(ValueError, match="too long"):
        frames.publish_record(True, b"i", "t" * 0x10000, b"", 0, False, None, None, 0, False)


async def test_a_forward_to_two_nodes_sends_each_its_kind_of_one_record() -> None:
    """One node keeps the message (a persistent session there: PUBLISH), the other reads
    PUBLISH_UNKEPT: the frames differ in their kind only, and the message's id is given once."""
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-0", 2, online=True), None)
    links = {}
    for node in ("node-1", "node-2"):
        link = PeerLink(hub)
        hub.link_hello(link, FrameDecoder().feed(frames.hello(node, 3))[0][1])
        hub.recovery.resume(link, 0)
        link._out.clear()  # the snapshot
        hub.table.route(node, "t/#", True)
        links[node] = link
    hub.table.durable_sub(node, "c", DurableSub("t/#", "t/#", 1, 0), True)  # on node-2
    message = Message("t/x", b"payload", 1, False, None, "pub", 0.0)
    assert hub.forward(message) == 2
    sent = {node: link._out[0] for node, link in links.items()}
    record = encode_record("node-0/2/f1", "t/x", b"payload", 1, False, None, "pub", 1, False)
    assert sent["node-1"] == frames.publish(record, False)  # unkept: nothing waits there
    assert sent["node-2"] == frames.publish(record, True)
    assert message.forward_id == "node-0/2/f1"

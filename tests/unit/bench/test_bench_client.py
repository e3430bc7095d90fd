"""The load client's hot path (fed bytes through a fake transport) and its publish schedule."""

from __future__ import annotations

import asyncio
from time import monotonic_ns
from typing import cast

import pytest
import uvloop

from tests.support.virtual_loop import VirtualLoop
from xmq.bench import publish_schedule
from xmq.bench.connection import BenchConnection, CounterSink
from xmq.bench.histogram import bucket_index
from xmq.bench.packets import (
    MQTT_V5,
    MQTT_V311,
    PAYLOAD,
    FrameSplitter,
    PublishTemplate,
    decode_publish,
    encode_connect,
    encode_puback,
    encode_varint,
)
from xmq.bench.publish_schedule import PublishSchedule


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _connected(
    protocol: int = MQTT_V5, template: PublishTemplate | None = None
) -> tuple[BenchConnection, FakeTransport, CounterSink]:
    sink = CounterSink()
    connection = BenchConnection(
        sink,
        encode_connect("sub", protocol=protocol),
        protocol=protocol,
        template=template,
        publisher_id=9 if template else -1,
    )
    transport = FakeTransport()
    connection.connection_made(cast(asyncio.BaseTransport, transport))
    return connection, transport, sink


def _connack(receive_maximum: int | None = None) -> bytes:
    props = b"" if receive_maximum is None else b"\x21" + receive_maximum.to_bytes(2, "big")
    body = b"\x00\x00" + encode_varint(len(props)) + props
    return b"\x20" + encode_varint(len(body)) + body


def _publishes(seqs: list[int], protocol: int, publisher: int = 3, qos: int = 1) -> bytes:
    template = PublishTemplate("bench/topic", qos=qos, protocol=protocol)
    return b"".join(
        template.encode(index + 1, 1_000, seq, publisher) for index, seq in enumerate(seqs)
    )


@pytest.mark.parametrize("protocol", [MQTT_V5, MQTT_V311], ids=["v5", "v311"])
@pytest.mark.parametrize("chunk", [1, 7, 10_000], ids=["byte-by-byte", "chunks-of-7", "whole"])
async def test_subscriber_accounts_and_acknowledges(protocol: int, chunk: int) -> None:
    connection, transport, sink = _connected(protocol)
    stream = _connack() + _publishes([0, 1, 2, 2, 5, 4], protocol)
    for start in range(0, len(stream), chunk):
        connection.data_received(stream[start : start + chunk])
    assert connection.connack.done()
    assert sink.live == 1
    counters = sink.counters
    assert counters.delivered == 5
    assert counters.duplicates == 1
    assert sum(counters.hist) == 5
    tracker = connection.trackers[3]
    assert tracker.out_of_order == 1
    assert tracker.highest == 5
    acks = b"".join(transport.written[1:])  # first write is CONNECT
    assert acks == b"".join(encode_puback(n) for n in range(1, 7))


async def test_qos0_deliveries_are_not_acknowledged() -> None:
    connection, transport, sink = _connected()
    connection.data_received(_connack() + _publishes([0, 1], MQTT_V5, qos=0))
    assert sink.counters.delivered == 2
    assert transport.written == [encode_connect("sub", protocol=MQTT_V5)]


async def test_long_frames_use_multi_byte_remaining_length() -> None:
    connection, _, sink = _connected()
    template = PublishTemplate("t" * 500, qos=1)
    data = _connack() + template.encode(1, 0, 0, 4) + template.encode(2, 0, 1, 4)
    connection.data_received(data[:300])
    connection.data_received(data[300:])
    assert sink.counters.delivered == 2


async def test_publisher_respects_receive_maximum_and_sends_backlog_on_puback() -> None:
    template = PublishTemplate("t", qos=1)
    connection, transport, sink = _connected(template=template)
    connection.data_received(_connack(receive_maximum=2))
    assert connection.receive_maximum == 2
    connection.publish(3, now_ns=5)
    assert connection.inflight == 2
    assert connection.backlog == 1
    assert sink.counters.held_back == 1
    frames = FrameSplitter().feed(b"".join(transport.written[1:]))
    assert len(frames) == 2
    connection.data_received(encode_puback(1))
    assert connection.backlog == 0
    assert connection.inflight == 2
    assert sink.counters.sent == 3
    views = [decode_publish(f) for f in FrameSplitter().feed(b"".join(transport.written[1:]))]
    assert [v.packet_id for v in views] == [1, 2, 3]
    assert [PAYLOAD.unpack(v.payload)[1:] for v in views] == [(0, 9), (1, 9), (2, 9)]


async def test_qos2_subscriber_answers_pubrec_then_pubcomp_and_counts_a_resend_once() -> None:
    connection, transport, sink = _connected()
    first = _publishes([0, 1], MQTT_V5, qos=2)  # packet ids 1 and 2
    connection.data_received(_connack() + first)
    assert connection.qos2_in == {1, 2}
    # packet 1 again with DUP (our PUBREC was lost): the same message, not a duplicate
    again = _publishes([0], MQTT_V5, qos=2)
    connection.data_received(bytes((again[0] | 0x08,)) + again[1:])
    connection.data_received(b"\x62\x02\x00\x01")  # PUBREL 1
    assert sink.counters.delivered == 2
    assert sink.counters.duplicates == 0
    assert connection.qos2_in == {2}
    written = b"".join(transport.written[1:])
    assert written == b"\x50\x02\x00\x01\x50\x02\x00\x02\x50\x02\x00\x01\x70\x02\x00\x01"
    # once released, a new message may reuse the id: counted (here a second copy of seq 0)
    connection.data_received(again)
    assert sink.counters.duplicates == 1


async def test_qos2_publisher_releases_on_pubrec_and_ends_on_pubcomp() -> None:
    template = PublishTemplate("t", qos=2)
    connection, transport, _ = _connected(template=template)
    connection.data_received(_connack(receive_maximum=2))
    connection.publish(3, now_ns=5)
    assert list(connection.qos2_out) == [1, 2] and connection.backlog == 1
    connection.data_received(b"\x50\x02\x00\x01")  # PUBREC 1
    assert transport.written[-1] == b"\x62\x02\x00\x01"  # PUBREL 1
    assert connection.qos2_out[1] is None and connection.inflight == 2
    connection.data_received(b"\x70\x02\x00\x01")  # PUBCOMP 1: the backlog goes out
    assert connection.inflight == 2 and connection.backlog == 0
    assert list(connection.qos2_out) == [2, 3]
    connection.data_received(b"\x50\x03\x00\x02\x97")  # PUBREC 2 with an error: ended
    assert list(connection.qos2_out) == [3] and connection.inflight == 1


async def test_qos2_publisher_resumes_its_exchanges_on_a_new_connection() -> None:
    template = PublishTemplate("t", qos=2)
    old, _, _ = _connected(template=template)
    old.data_received(_connack())
    old.publish(2, now_ns=5)
    old.data_received(b"\x50\x02\x00\x01")  # PUBREC 1; nothing for 2
    new, transport, _ = _connected(template=template)
    new.data_received(_connack())
    new.resume_qos2(old.qos2_out, old.next_packet_id)
    frames = FrameSplitter().feed(transport.written[-1])
    assert frames[0].first_byte == 0x62  # PUBREL 1
    assert frames[1].first_byte == 0x3C  # PUBLISH 2, QoS 2 with DUP
    assert decode_publish(frames[1]).packet_id == 2
    assert new.inflight == 2
    new.publish(1, now_ns=6)
    assert list(new.qos2_out) == [1, 2, 3]  # packet ids go on from the old connection's


async def test_publisher_counts_acks_that_did_not_store_the_message() -> None:
    connection, _, sink = _connected(template=PublishTemplate("t", qos=1))
    connection.data_received(_connack())
    connection.publish(3, now_ns=5)
    connection.data_received(b"\x40\x02\x00\x01")  # success (reason omitted)
    connection.data_received(b"\x40\x03\x00\x02\x10")  # no matching subscribers
    connection.data_received(b"\x40\x03\x00\x03\x80")  # unspecified error
    assert sink.ack_errors == {0x10: 1, 0x80: 1}
    assert connection.inflight == 0


async def test_connection_lost_fails_pending_connack() -> None:
    connection, _, sink = _connected()
    connection.connection_lost(None)
    with pytest.raises(ConnectionError):
        await connection.connack
    assert sink.counters.connection_losses == 0  # never connected: not a loss


async def test_loss_of_a_live_connection_is_counted() -> None:
    connection, _, sink = _connected()
    connection.data_received(_connack())
    connection.connection_lost(ConnectionResetError())
    assert sink.counters.connection_losses == 1
    assert sink.live == 0


async def test_server_disconnect_reason_is_recorded() -> None:
    connection, _, sink = _connected()
    connection.data_received(_connack() + b"\xe0\x01\x8e")
    assert sink.disconnect_reasons == {0x8E: 1}


class RecordingPublisher:
    def __init__(self) -> None:
        self.sends: list[int] = []

    def publish(self, count: int, now_ns: int) -> None:
        self.sends.append(count)


def test_schedule_sends_exactly_what_is_due() -> None:
    publishers = [RecordingPublisher() for _ in range(3)]
    lags: list[int] = []
    schedule = PublishSchedule(publishers, 100.0, 50, t0_ns=0, on_lag=lags.append)
    # 300 msg/s in total: message m is due at m / 300 s.
    assert schedule.due_by(-1) == 0
    assert schedule.send_due(0) == 1
    assert schedule.send_due(int(0.010 * 1e9)) == 3  # m = 1..3 due by 10 ms
    assert schedule.send_due(int(0.010 * 1e9)) == 0
    assert schedule.send_due(int(0.4 * 1e9)) == 117  # late tick: m = 4..120 at once
    assert max(lags) >= 386_000  # m = 4 was due at 13.3 ms
    assert schedule.send_due(int(10 * 1e9)) == 29  # never beyond the planned count
    assert [sum(p.sends) for p in publishers] == [50, 50, 50]
    assert schedule.next_index == schedule.total == 150


def test_schedule_round_robin_spreads_partial_ticks() -> None:
    publishers = [RecordingPublisher() for _ in range(4)]
    schedule = PublishSchedule(publishers, 1.0, 10, t0_ns=0)
    schedule.send_due(int(1.5 * 1e9))  # 4 msg/s: m = 0..6 due
    assert [sum(p.sends) for p in publishers] == [2, 2, 2, 1]


@pytest.mark.parametrize(
    "age_us", [0, 5, 31, 32, 100, 4_000, 250_000, 7_000_000], ids=lambda a: f"{a}us"
)
async def test_inline_histogram_matches_bucket_index(age_us: int) -> None:
    connection, _, sink = _connected()
    connection.data_received(_connack())
    sent = monotonic_ns() - age_us * 1000
    connection.data_received(PublishTemplate("t", qos=1).encode(1, sent, 0, 1))
    counters = sink.counters
    (bucket,) = [index for index, count in enumerate(counters.hist) if count]
    assert counters.lat_sum_us >= age_us
    assert bucket == bucket_index(counters.lat_sum_us)


@pytest.mark.parametrize(
    ("protocol", "expire", "packet"),
    [
        (MQTT_V5, False, b"\xe0\x00"),
        (MQTT_V5, True, b"\xe0\x07\x00\x05\x11\x00\x00\x00\x00"),
        (MQTT_V311, True, b"\xe0\x00"),
    ],
    ids=["v5-normal", "v5-expire-session", "v311-cannot-expire"],
)
async def test_disconnect_packets(protocol: int, expire: bool, packet: bytes) -> None:
    connection, transport, _ = _connected(protocol)
    connection.disconnect(expire_session=expire)
    assert transport.written[-1] == packet
    assert transport.closed
    (frame,) = FrameSplitter().feed(packet)
    assert frame.packet_type == 14


class CountingSchedule(PublishSchedule):
    ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        super().tick()


def test_schedule_ticks_no_closer_than_the_minimum_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a virtual clock: messages every 0.5 ms go about two per tick, one tick per ms."""
    loop = VirtualLoop(start=0.0)
    monkeypatch.setattr(asyncio, "get_running_loop", lambda: loop)
    monkeypatch.setattr(publish_schedule, "monotonic_ns", lambda: round(loop.now * 1e9))
    publishers = [RecordingPublisher() for _ in range(100)]
    schedule = CountingSchedule(publishers, 20.0, 10, t0_ns=0)
    schedule.start()  # 2,000 msg/s for 0.5 s: a message every 0.5 ms
    while loop.pending():
        loop.now = min(handle.when for handle in loop.handles if not handle.cancelled)
        loop.run_turn()
    assert schedule.next_index == 1000 and schedule.handle is None
    assert sum(sum(p.sends) for p in publishers) == 1000
    assert 450 <= schedule.ticks <= 501  # one tick per millisecond, not one per message
    assert schedule.done_ns == round(loop.now * 1e9) <= 501_000_000


# uvloop's own timers (they round delays under 1 ms down to zero) on the real clock.
@pytest.mark.integration
def test_schedule_does_not_spin_uvloop_between_close_messages() -> None:
    publishers = [RecordingPublisher() for _ in range(100)]

    async def run() -> CountingSchedule:
        schedule = CountingSchedule(publishers, 20.0, 10, t0_ns=monotonic_ns())
        schedule.start()  # 2,000 msg/s for 0.5 s: a message every 0.5 ms
        await asyncio.sleep(0.6)
        schedule.stop()
        return schedule

    schedule = uvloop.run(run())
    assert schedule.next_index == 1000
    assert sum(sum(p.sends) for p in publishers) == 1000
    assert schedule.ticks <= 700  # about one tick per millisecond, not a busy loop

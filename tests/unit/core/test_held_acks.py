"""A publisher's PUBACK / PUBREC held until its message's durable records are written."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.sink_link import SinkLink, connect_client
from tests.support.virtual_broker import on_virtual_loop
from xmq.codec.packets import (
    MQTT_5,
    Connect,
    Puback,
    Publish,
    Pubrec,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, DurableHold
from xmq.core.connection import ClientConnection
from xmq.core.fanout_slices import RECORDS_AHEAD, RECORDS_WAIT_S, SLICE
from xmq.core.held_acks import AckGate
from xmq.core.message import Message
from xmq.core.session import Delivery, Session
from xmq.core.settings import CoreSettings


class CountingLink(SinkLink):
    __slots__ = ("paused",)

    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class FakeConn:
    """A real connection over a counting link (the compiled gate takes no stand-in), not
    logged in: the gate only writes to its link, reads its version and its session."""

    def __init__(self, version: int = MQTT_5) -> None:
        self.link = CountingLink()
        self.conn = ClientConnection(
            Broker(CoreSettings()), self.link, AnonymousAuthenticator(), AllowAll()
        )
        self.conn.version = version


def _conn(fake: FakeConn) -> ClientConnection:
    return fake.conn


def _paused(fake: FakeConn) -> bool:
    return fake.link.paused


async def test_the_ack_goes_out_when_the_last_hold_is_released() -> None:
    gate = AckGate(10)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 1, 7)
    held.hold()  # a local record
    held.hold()  # a node link
    held.release()  # routing is over
    assert fake.link.out == b""
    held.release()
    assert fake.link.out == b""
    assert gate.held == 1
    assert gate.waiting(_conn(fake)) == 1
    held.release()
    assert fake.link.packets() == [Puback(7)]
    assert gate.held == 0
    assert gate.waiting(_conn(fake)) == 0


async def test_a_reason_code_only_for_mqtt_5() -> None:
    gate = AckGate(10)
    v5, v4 = FakeConn(), FakeConn(version=4)
    for fake in (v5, v4):
        held = gate.begin(_conn(fake), "pub", 1, 3)
        held.routed(0, False)
    assert bytes(v5.link.out) == b"\x40\x03\x00\x03\x10"
    assert bytes(v4.link.out) == b"\x40\x02\x00\x03"


async def test_a_qos2_publish_resent_on_a_new_connection_gets_the_held_pubrec_there() -> None:
    gate = AckGate(10)
    old, new = FakeConn(), FakeConn()
    held = gate.begin(_conn(old), "pub", 2, 9)
    assert gate.resent(_conn(new), "pub", 9)
    assert not gate.resent(_conn(new), "pub", 10)
    assert gate.waiting(_conn(old)) == 0
    assert gate.waiting(_conn(new)) == 1
    held.release()
    assert old.link.out == b""
    assert new.link.packets() == [Pubrec(9)]
    assert not gate.resent(_conn(new), "pub", 9)  # released: a new PUBREC is sent at once


async def test_a_client_with_receive_maximum_held_acks_is_not_read_until_one_goes() -> None:
    gate = AckGate(2)
    fake = FakeConn()
    first = gate.begin(_conn(fake), "pub", 1, 1)
    first.hold()  # a record
    first.release()  # routing over: the record still holds it
    assert not _paused(fake)
    second = gate.begin(_conn(fake), "pub", 1, 2)
    second.hold()
    assert _paused(fake)  # (before its routing is over: the next packet is not read)
    second.release()
    first.release()
    assert not _paused(fake)
    assert gate.waiting(_conn(fake)) == 1
    second.release()
    assert fake.link.packets() == [Puback(1), Puback(2)]
    assert gate.waiting(_conn(fake)) == 0


async def test_a_puback_nothing_holds_goes_with_its_routing_and_is_never_counted() -> None:
    gate = AckGate(1)  # a window of one: counting it would pause the publisher
    fake = FakeConn()
    for packet_id in (1, 2, 3):
        held = gate.begin(_conn(fake), "pub", 1, packet_id)
        assert gate.waiting(_conn(fake)) == 0 and gate.held == 1
        held.routed(1, False)
        assert not _paused(fake)
    assert fake.link.packets() == [Puback(1), Puback(2), Puback(3)]
    assert gate.held == 0


async def test_a_puback_waiting_for_a_fan_out_counts_against_the_window() -> None:
    gate = AckGate(1)
    fake = FakeConn()
    held = gate.begin(_conn(fake), "pub", 1, 4)
    held.waits()  # a fan-out over later loop turns
    assert gate.waiting(_conn(fake)) == 1 and _paused(fake)
    held.hold()  # a later slice's record: counted once
    assert gate.waiting(_conn(fake)) == 1
    held.release()
    held.routed(2, False)  # the last slice
    assert fake.link.packets() == [Puback(4)]
    assert gate.waiting(_conn(fake)) == 0 and not _paused(fake)


class FakeStore:
    """Records wait until ``write_all``; the hold the core passes is taken per record."""

    ids_first = False  # a QoS 2 PUBLISH need not wait for its packet id's record

    def __init__(self) -> None:
        self.pending: list[tuple[Session, Delivery, DurableHold | None]] = []
        self.inbound: list[tuple[int, DurableHold | None]] = []

    def record(
        self, session: Session, delivery: Delivery, now: float, context: DurableContext
    ) -> bool:
        hold = context.hold
        if hold is not None:
            hold.hold()
        self.pending.append((session, delivery, hold))
        return True

    @property
    def unwritten(self) -> int:
        return len(self.pending)

    def write_all(self) -> None:
        pending, self.pending = self.pending, []
        for session, delivery, hold in pending:
            session.deliver_recorded(delivery, 0.0)
            if hold is not None:
                hold.release()

    def inbound_changed(
        self,
        session: Session,
        packet_id: int,
        added: bool,
        hold: DurableHold | None,
        generation: int | None = None,
    ) -> None:
        self.inbound.append((packet_id, hold))

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # sent, acknowledged, subscribed, ...


class FakeRouter:
    """A cluster router whose remote records are confirmed by ``confirm``."""

    def __init__(self) -> None:
        self.holds: list[DurableHold] = []
        self.given: list[DurableHold | None] = []  # what each ``forward`` was given
        self.keeps = True  # what ``may_hold`` says: a node with persistent sessions, ...

    def may_hold(self) -> bool:
        return self.keeps

    def forward(self, message: Message, hold: DurableHold | None = None) -> int:
        self.given.append(hold)
        if hold is None:
            return 0
        hold.hold()
        self.holds.append(hold)
        return 1

    def confirm(self) -> None:
        holds, self.holds = self.holds, []
        for hold in holds:
            hold.release()

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # subscription_changed, session_gone, ...


def _cluster_broker() -> tuple[Broker, FakeStore, FakeRouter]:
    broker = Broker(CoreSettings())
    store, router = FakeStore(), FakeRouter()
    broker.store = store
    broker.cluster = router
    broker.acks = AckGate(100)
    return broker, store, router


def _persistent(client_id: str) -> Connect:
    props = Properties()
    props.session_expiry_interval = 600
    return Connect(client_id=client_id, clean_start=True, properties=props)


async def test_the_puback_waits_for_the_local_record_and_the_other_nodes() -> None:
    broker, store, router = _cluster_broker()
    sub, sub_link = await connect_client(broker, "sub", _persistent("sub"))
    sub.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    pub, pub_link = await connect_client(broker, "pub")
    pub.handle(Publish("t", b"m", qos=1, packet_id=5))
    assert pub_link.packets() == []  # the record is not written yet
    sub_link.packets()
    store.write_all()
    assert pub_link.packets() == []  # another node has not confirmed its record yet
    router.confirm()
    assert pub_link.packets() == [Puback(5)]
    [delivered] = [p for p in sub_link.packets() if isinstance(p, Publish)]
    assert delivered.payload == b"m"


async def test_the_pubrec_waits_for_the_other_nodes_and_for_the_inbound_id_record() -> None:
    broker, store, router = _cluster_broker()
    pub, pub_link = await connect_client(broker, "pub", _persistent("pub"))
    pub.handle(Publish("far", b"m", qos=2, packet_id=8))
    assert [packet_id for packet_id, hold in store.inbound if hold is not None] == [8]
    assert pub_link.packets() == []
    router.confirm()
    assert pub_link.packets() == [Pubrec(8)]  # routed to a node: no "no subscribers" code


async def test_nothing_durable_acks_at_once_and_standalone_never_holds() -> None:
    broker, _, _ = _cluster_broker()
    broker.cluster = None
    pub, link = await connect_client(broker, "pub")
    pub.handle(Publish("nobody", b"m", qos=1, packet_id=2))
    [ack] = link.packets()
    assert isinstance(ack, Puback) and ack.packet_id == 2 and ack.reason_code == 0x10
    assert broker.acks is not None and broker.acks.held == 0
    alone = Broker(CoreSettings())
    assert alone.acks is None
    conn, alone_link = await connect_client(alone, "pub")
    conn.handle(Publish("nobody", b"m", qos=1, packet_id=3))
    assert len(alone_link.packets()) == 1


def _held_last(router: FakeRouter) -> bool:
    """Whether the last ``forward`` was given a hold."""
    return router.given[-1] is not None


def _durable(broker: Broker) -> int:
    """(a call: mypy narrows no attribute across the calls that change it)"""
    return broker.durable_sessions


async def test_a_puback_nothing_may_hold_is_routed_without_a_hold() -> None:
    """In a cluster, a QoS 1 PUBLISH whose routing nothing durable may hold (no session with
    a store here, not retained, no shared group here, nothing the router keeps) is routed
    without a held ack, its PUBACK written at once with its reason; any of them holds it."""
    broker, store, router = _cluster_broker()
    router.keeps = False
    sub, sub_link = await connect_client(broker, "sub")  # a clean subscriber
    sub.handle(Subscribe(1, [SubscriptionRequest("t", 1), SubscriptionRequest("r", 1)]))
    pub, pub_link = await connect_client(broker, "pub")
    pub.handle(Publish("t", b"m", qos=1, packet_id=1))
    pub.handle(Publish("nobody", b"m", qos=1, packet_id=2))
    assert router.given == [None, None] and pub_link.packets() == [Puback(1), Puback(2, 0x10)]
    assert broker.acks is not None and broker.acks.held == 0
    pub.handle(Publish("r", b"m", qos=1, retain=True, packet_id=3))  # its record holds it
    pub.handle(Publish("t", b"m", qos=2, packet_id=4))  # a PUBREC is always held
    router.keeps = True  # e.g. a node with persistent sessions now
    pub.handle(Publish("t", b"m", qos=1, packet_id=5))
    assert [hold is not None for hold in router.given[2:]] == [True, True, True]
    assert pub_link.packets() == []
    router.confirm()
    assert pub_link.packets() == [Puback(3), Pubrec(4), Puback(5)]
    router.keeps = False
    durable, _ = await connect_client(broker, "durable", _persistent("durable"))
    assert _durable(broker) == 1  # a session with a store here: its records hold it
    pub.handle(Publish("t", b"m", qos=1, packet_id=6))
    assert _held_last(router) and pub_link.packets() == []
    router.confirm()
    assert pub_link.packets() == [Puback(6)]
    durable.connection_lost()
    broker.hand_over("durable")
    assert _durable(broker) == 0
    pub.handle(Publish("t", b"m", qos=1, packet_id=7))
    assert not _held_last(router) and pub_link.packets() == [Puback(7)]
    sub.handle(Subscribe(2, [SubscriptionRequest("$share/g/t", 1)]))  # a shared group here
    pub.handle(Publish("t", b"m", qos=1, packet_id=8))
    assert _held_last(router)
    router.confirm()
    assert pub_link.packets() == [Puback(8)]


async def test_a_message_dropped_everywhere_for_a_quota_is_quota_exceeded() -> None:
    """Routing counted two deliveries: one dropped for a quota here, the other (a frame to
    another node) reported dropped there: PUBREC 0x97, and the exchange ends (its id is
    forgotten); with one delivered somewhere it is a success."""
    gate = AckGate(10)
    fake = FakeConn()
    settings = CoreSettings()
    publisher = Session("pub", settings.queues, Broker(settings).stats)  # the publishing session
    ids = publisher.inbound_for_update()
    ids.update({5, 6})
    fake.conn.session = publisher
    held = gate.begin(_conn(fake), "pub", 2, 5)
    held.hold()  # the frame to the other node
    held.routed(1, True)  # routing is over: it counted one delivery, one dropped for a quota
    assert fake.link.out == b""
    held.undelivered(0x97)  # that node's PUBLISH_ACK
    assert bytes(fake.link.out) == b"\x50\x03\x00\x05\x97"
    assert ids == {6}
    other = gate.begin(_conn(fake), "pub", 2, 6)
    other.hold()
    other.routed(2, True)  # dropped here, kept on the other node
    other.release()
    assert fake.link.packets()[-1] == Pubrec(6)
    assert ids == {6}


async def test_a_sliced_fan_out_holds_the_puback_for_the_records_of_every_slice() -> None:
    broker, store, router = _cluster_broker()
    for n in range(SLICE + 10):
        conn, _ = await connect_client(broker, f"sub{n}", _persistent(f"sub{n}"))
        conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    pub, pub_link = await connect_client(broker, "pub")
    pub.handle(Publish("t", b"m", qos=1, packet_id=5))
    for _ in range(100):  # the fan-out's loop turns
        if not pub.fanning_out:
            break
        await asyncio.sleep(0)
    assert pub.fanning_out == 0
    assert len(store.pending) == SLICE + 10
    assert all(hold is not None for _, _, hold in store.pending)  # later slices' records too
    router.confirm()
    assert pub_link.packets() == []
    store.write_all()
    assert pub_link.packets() == [Puback(5)]


async def test_a_fan_out_waits_while_the_store_is_records_behind() -> None:
    """No slice goes while ``RECORDS_AHEAD`` records wait for the store: each one holds its
    delivery, write and callback until written (200,000 made at once grew a node ~60 MB)."""
    broker, store, router = _cluster_broker()
    loop = on_virtual_loop(broker)  # the slices' turns and the store wait's timer
    sessions = RECORDS_AHEAD + 2 * SLICE
    for n in range(sessions):
        conn, _ = await connect_client(broker, f"sub{n}", _persistent(f"sub{n}"))
        conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    pub, pub_link = await connect_client(broker, "pub")
    pub.handle(Publish("t", b"m", qos=1, packet_id=5))
    for _ in range(50):  # many more turns than the slices up to the bound take
        loop.run_turn()
    ahead = len(store.pending)
    assert RECORDS_AHEAD <= ahead < RECORDS_AHEAD + SLICE  # (a slice may cross it) then waits
    assert pub.fanning_out == 1
    loop.advance(RECORDS_WAIT_S)  # it looks again, and waits again: nothing was written
    for _ in range(5):
        loop.run_turn()
    assert len(store.pending) == ahead and pub.fanning_out == 1
    store.write_all()  # the store caught up: the rest goes at its next look
    loop.advance(RECORDS_WAIT_S)
    for _ in range(10):
        loop.run_turn()
    assert pub.fanning_out == 0
    assert len(store.pending) == sessions - ahead
    router.confirm()
    store.write_all()
    assert pub_link.packets() == [Puback(5)]

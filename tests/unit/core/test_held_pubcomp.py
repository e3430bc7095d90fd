"""A persistent session's PUBCOMP (inbound QoS 2) held until the store has removed its packet
id (``max_queued_writes: 0``); other sessions and brokers without held acks answer at once."""

from __future__ import annotations

from typing import Any

from tests.support.sink_link import connect_client
from xmq.codec.packets import Connect, Pubcomp, Publish, Pubrec, Pubrel
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableHold
from xmq.core.held_acks import AckGate
from xmq.core.session import Session
from xmq.core.settings import CoreSettings

_NOBODY = 0x10  # PUBREC: no matching subscribers (nobody subscribes to "t")


class FakeStore:
    """Inbound id changes wait until ``write_all`` and take the hold the core passes."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, bool, DurableHold]] = []

    def inbound_changed(
        self,
        session: Session,
        packet_id: int,
        added: bool,
        hold: DurableHold | None,
        generation: int | None = None,
    ) -> None:
        if hold is not None:
            hold.hold()
            self.pending.append((packet_id, added, hold))

    def write_all(self) -> list[tuple[int, bool]]:
        pending, self.pending = self.pending, []
        for _, _, hold in pending:
            hold.release()
        return [(packet_id, added) for packet_id, added, _ in pending]

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # record, sent, acknowledged, subscribed, ...


def _broker(held: bool = True) -> tuple[Broker, FakeStore]:
    broker = Broker(CoreSettings())
    store = FakeStore()
    broker.store = store
    if held:
        broker.acks = AckGate(100)
    return broker, store


def _connect(client_id: str, expiry: int) -> Connect:
    props = Properties()
    props.session_expiry_interval = expiry
    return Connect(client_id=client_id, clean_start=False, properties=props)


async def test_the_pubcomp_waits_for_the_removal_of_the_id() -> None:
    broker, store = _broker()
    conn, link = await connect_client(broker, "pub", _connect("pub", 600))
    conn.handle(Publish("t", b"m", qos=2, packet_id=4))
    assert store.write_all() == [(4, True)]
    assert link.packets() == [Pubrec(4, _NOBODY)]
    conn.handle(Pubrel(4))
    assert link.packets() == []
    assert store.write_all() == [(4, False)]
    assert link.packets() == [Pubcomp(4)]
    assert broker.acks is not None and broker.acks.held == 0


async def test_a_pubrel_resent_after_a_reconnect_gets_the_held_pubcomp() -> None:
    broker, store = _broker()
    conn, old_link = await connect_client(broker, "pub", _connect("pub", 600))
    conn.handle(Publish("t", b"m", qos=2, packet_id=4))
    store.write_all()
    old_link.packets()
    conn.handle(Pubrel(4))
    conn.connection_lost()
    new_conn, new_link = await connect_client(broker, "pub", _connect("pub", 600))
    new_conn.handle(Pubrel(4))  # not answered "not found" while the id is still stored
    assert new_link.packets() == []
    assert store.write_all() == [(4, False)]
    assert new_link.packets() == [Pubcomp(4)]
    assert old_link.packets() == []
    new_conn.handle(Pubrel(4))  # removed by now: "not found", at once
    [late] = new_link.packets()
    assert isinstance(late, Pubcomp) and late.reason_code == 0x92


async def test_clean_sessions_and_brokers_without_held_acks_answer_at_once() -> None:
    broker, store = _broker()
    conn, link = await connect_client(broker, "clean", _connect("clean", 0))
    conn.handle(Publish("t", b"m", qos=2, packet_id=2))
    conn.handle(Pubrel(2))
    assert link.packets() == [Pubrec(2, _NOBODY), Pubcomp(2)]
    assert store.pending == []
    unheld, _ = _broker(held=False)  # max_queued_writes N, or no cluster
    conn, link = await connect_client(unheld, "pub", _connect("pub", 600))
    conn.handle(Publish("t", b"m", qos=2, packet_id=5))
    conn.handle(Pubrel(5))
    assert link.packets() == [Pubrec(5, _NOBODY), Pubcomp(5)]

"""A shared group gets an inbound QoS 2 message once however often it is routed
(``core.shared_claims``), with the real core, store and scripts on a real Redis.

A re-sent PUBLISH (DUP) routed again — on another node, or on the same node after its claim
read the packet id back — carries the same message id (``core.inbound_ids``). Each member's
delivery of it claims the group (``shared:seen:<message id>:<group>/<filter>``): a persistent
member's record carries the marker, a clean member is given the message once its claim is
written. The second routing finds the group's marker and gives the group nothing; a message
handed on from one member to another (the member's connection ended) claims nothing, so the
hand-off still delivers it.
"""

from __future__ import annotations

from functools import partial

import pytest
import redis

from tests.support.node_leases import write_lease
from tests.support.redis_server import RedisServer
from tests.support.sink_link import SinkLink
from tests.unit.store import test_qos2_inbound_release as inbound
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder
from xmq.cluster.peer_link import PeerLink
from xmq.codec.packets import Connect, Publish, Pubrel, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.contract import ClusterKeys
from xmq.contract.session_scripts import FencedWrites
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import CONNECTED
from xmq.core.message import Message
from xmq.core.shared_claims import claim_id, handed_on

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-inbound-ids")  # the helpers' cluster (their leases)
A, B = ("a-0", 3), ("b-0", 5)
MESSAGE_ID = "abc/q5.0"
server, sync = inbound.server, inbound.sync  # the fixtures: a Redis, flushed for each test
_broker, _until = inbound._broker, inbound._until


def _eval(client: redis.Redis, call: tuple[str, tuple[str, ...], tuple[object, ...]]) -> object:
    script, keys, args = call
    try:
        return client.eval(script, len(keys), *keys, *args)  # type: ignore[arg-type]
    except redis.ResponseError as error:
        return str(error)


# -- the script -----------------------------------------------------------------------------


def test_a_group_is_claimed_once_and_a_member_record_marks_it(sync: redis.Redis) -> None:
    marker = KEYS.shared_seen(MESSAGE_ID, "g", "a/+/c")
    at_a, at_b = FencedWrites(KEYS, A), FencedWrites(KEYS, B)
    claim_1, claim_2 = ("c", marker, "m1", "", ""), ("c", marker, "m2", "", "")
    assert str(_eval(sync, at_a.build([claim_1]))).startswith("FENCED")  # no lease
    assert not sync.exists(marker)
    write_lease(sync, KEYS, *A)
    write_lease(sync, KEYS, *B)
    assert _eval(sync, at_a.build([claim_1])) == [1]
    assert _eval(sync, at_b.build([claim_2])) == [0]  # another node's routing: the group has it
    assert _eval(sync, at_a.build([claim_2])) == [0]  # this node's second routing neither
    # a call cut off by a lost connection, sent again: its own claim, for the same member
    assert _eval(sync, at_a.build([claim_1], once=True)) == [1]
    assert _eval(sync, at_a.build([claim_2], once=True)) == [0]
    assert _eval(sync, at_b.build([claim_1], once=True)) == [0]
    assert 0 < int(sync.pttl(marker)) <= 60_000
    # a persistent member's record carries the group's marker: not pushed once claimed ...
    queue = KEYS.session_queue("m3")
    assert _eval(sync, at_b.build([("r", queue, b"rec", marker, "")])) == [0]
    assert not sync.exists(queue)
    # ... and, pushed first, it makes a later claim or record of the group a no-op
    other = KEYS.shared_seen("abc/q6.0", "g", "a/+/c")
    assert _eval(
        sync, at_b.build([("r", queue, b"rec", other, ""), ("c", other, "m1", "", "")])
    ) == [1, 0]
    assert sync.lrange(queue, 0, -1) == [b"rec"]


def test_only_an_inbound_qos2_message_claims_and_a_handed_on_one_does_not() -> None:
    message = Message("t", b"m", 2, False, None, "pub", 0.0, forward_id=MESSAGE_ID)
    assert claim_id(message) == MESSAGE_ID
    assert claim_id(Message("t", b"m", 1, False, None, "pub", 0.0, forward_id=MESSAGE_ID)) == ""
    assert claim_id(Message("t", b"m", 2, False, None, "pub", 0.0, forward_id="a-0/3/f9")) == ""
    moved = handed_on(message)
    assert claim_id(moved) == "" and moved.forward_id == ""
    assert (moved.topic, moved.payload, moved.qos, moved.origin) == ("t", b"m", 2, "pub")


# -- the core and the store -------------------------------------------------------------------


async def _member(
    broker: Broker, client_id: str, persistent: bool, receive_maximum: int | None = None
) -> tuple[ClientConnection, MemberLink]:
    """A connection subscribed to ``$share/g/t`` at QoS 2."""
    props = Properties()
    if persistent:
        props.session_expiry_interval = 300
    if receive_maximum is not None:
        props.receive_maximum = receive_maximum
    link = MemberLink()
    conn = ClientConnection(broker, link, AnonymousAuthenticator(), AllowAll())
    conn.handle(Connect(client_id=client_id, clean_start=True, properties=props))
    await _until(lambda: conn.state == CONNECTED)
    conn.handle(Subscribe(1, [SubscriptionRequest("$share/g/t", qos=2)]))
    await broker.store.flush()  # type: ignore[union-attr]
    return conn, link


class MemberLink(SinkLink):
    """A member's connection, keeping every PUBLISH it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: list[bytes] = []


def _payloads(link: MemberLink) -> list[bytes]:
    """Every payload the member was given so far."""
    link.payloads += [p.payload for p in link.packets() if isinstance(p, Publish)]
    return link.payloads


def _routed(broker: Broker, payload: bytes = b"cmd") -> None:
    """A routing of the publisher's QoS 2 message (its id: the same for every routing)."""
    message = Message("t", payload, 2, False, None, "pub", 0.0, forward_id=MESSAGE_ID)
    broker.publish(message, DurableContext(None, MESSAGE_ID))


@pytest.mark.parametrize("kinds", [(False, False), (True, True), (False, True), (True, False)])
async def test_two_nodes_routing_one_message_give_the_group_one_copy(
    server: RedisServer, sync: redis.Redis, kinds: tuple[bool, bool]
) -> None:
    node_a, store_a = await _broker(server, A, KEYS)
    node_b, store_b = await _broker(server, B, KEYS)
    links = [
        (await _member(node, f"m{index}", persistent))[1]
        for index, (node, persistent) in enumerate(zip((node_a, node_b), kinds, strict=True))
    ]
    _routed(node_a)
    await store_a.flush()
    _routed(node_b)  # the re-sent PUBLISH routed again on B: its own member first
    await store_b.flush()
    await _until(lambda: sum(len(_payloads(link)) for link in links) >= 1)
    await store_a.flush()
    await store_b.flush()
    assert [_payloads(link) for link in links] == [[b"cmd"], []]
    assert store_b.duplicates == 1


async def test_one_node_routing_one_message_twice_gives_the_group_one_copy(
    server: RedisServer, sync: redis.Redis
) -> None:
    node, store = await _broker(server, A, KEYS)
    links = [(await _member(node, f"m{index}", index == 1))[1] for index in range(2)]
    _routed(node)
    _routed(node)  # the next member in round-robin order: its claim finds the first one's
    await store.flush()
    await _until(lambda: sum(len(_payloads(link)) for link in links) >= 1)
    await store.flush()
    assert sorted(len(_payloads(link)) for link in links) == [0, 1]
    assert store.duplicates == 1


async def test_a_message_a_member_gave_up_goes_to_another_member(
    server: RedisServer, sync: redis.Redis
) -> None:
    node, store = await _broker(server, A, KEYS)
    # the first member's window is full: the claimed message waits in its queue
    first, first_link = await _member(node, "m0", True, receive_maximum=1)
    node.publish(Message("t", b"filler", 2, False, None, "pub", 0.0))
    await store.flush()
    await _until(lambda: _payloads(first_link) == [b"filler"])
    _routed(node)
    await store.flush()
    assert sync.exists(KEYS.shared_seen(MESSAGE_ID, "g", "t"))
    _, second_link = await _member(node, "m1", False)
    first.connection_lost()  # gone, its session stays: its queued shared message moves on
    await store.flush()
    await _until(lambda: _payloads(second_link) == [b"cmd"])
    assert _payloads(first_link) == [b"filler"]


def _has(link: MemberLink, count: int) -> bool:
    return len(_payloads(link)) == count


def _calls(sync: redis.Redis) -> dict[str, int]:
    """Redis's count of each command so far (those its scripts call included)."""
    return {name[8:]: int(entry["calls"]) for name, entry in sync.info("commandstats").items()}


async def test_a_clean_member_s_claim_costs_no_redis_call_of_its_own(
    server: RedisServer, sync: redis.Redis
) -> None:
    """The claim is one more write in the call that adds the publisher's packet id (same loop
    turn, same ``FENCED_WRITES`` call): a message to a clean member of a shared group costs the
    Redis calls one to a clean non-shared subscriber costs (a cost check: no claim costs the
    same)."""
    node, store = await _broker(server, A, KEYS)
    publisher = await inbound._connect(node, SinkLink(), client_id="pub")
    plain_link = MemberLink()
    plain = ClientConnection(node, plain_link, AnonymousAuthenticator(), AllowAll())
    plain.handle(Connect(client_id="plain", clean_start=True))
    await _until(lambda: plain.state == CONNECTED)
    _, member_link = await _member(node, "m0", False)
    counts = []
    for topic, link in (("p", plain_link), ("t", member_link)):
        if topic == "p":
            plain.handle(Subscribe(1, [SubscriptionRequest("p", qos=2)]))
        await store.flush()
        before = _calls(sync)
        for packet_id in range(1, 11):
            publisher.handle(Publish(topic, b"x", qos=2, packet_id=packet_id))
            await _until(partial(_has, link, packet_id))
            publisher.handle(Pubrel(packet_id))
            await store.flush()
        after = _calls(sync)
        counts.append({name: after[name] - before.get(name, 0) for name in after} | {"info": 0})
    # per message: one call adding its packet id (and the claim), one releasing it; the
    # claim is a GET, a SET and the marker index's SADD and PEXPIRE inside the first, and the
    # release (which reads the index in either case) shortens the claim's TTL: a PEXPIRE
    added = {name: counts[1][name] - counts[0].get(name, 0) for name in counts[1]}
    assert counts[0]["evalsha"] == counts[1]["evalsha"] == 20, counts
    assert added["get"] == added["set"] == added["sadd"] == 10, counts
    assert added["pexpire"] == 20, counts
    assert not any(added.get(name) for name in ("srem", "hset", "rpush", "smembers")), counts


async def test_a_claim_whose_member_left_meanwhile_goes_to_another_member(
    server: RedisServer, sync: redis.Redis
) -> None:
    node, store = await _broker(server, A, KEYS)
    first, first_link = await _member(node, "m0", False)
    _, second_link = await _member(node, "m1", False)
    _routed(node)  # the first member is picked; its claim is on its way to Redis
    first.connection_lost()  # its clean session ends before the claim is answered
    await store.flush()
    await _until(lambda: _payloads(second_link) == [b"cmd"])
    assert _payloads(first_link) == []
    _routed(node)  # a re-send: the group has it
    await store.flush()
    assert _payloads(second_link) == [b"cmd"] and store.duplicates == 1


async def test_a_shared_message_re_dispatched_after_its_link_dropped_reaches_the_group_once(
    server: RedisServer, sync: redis.Redis
) -> None:
    """Node A sent the message to node B's member (a SHARED frame); B's member had it (its
    claim written) but the link dropped before B's SHARED_ACK came back. A re-dispatches the
    unacknowledged frame to a member of its own: that member's claim finds B's, and the group
    is not given the message twice. (A message a member gave up is handed on without its id
    instead: the group's marker is its own then.)"""
    node_a, store_a = await _broker(server, A, KEYS)
    node_b, store_b = await _broker(server, B, KEYS)
    hub = ClusterHub(node_a, NodeIdentity(*A, online=True), store_a)
    node_a.cluster = hub
    _, here = await _member(node_a, "m0", False)
    _, there = await _member(node_b, "m1", False)
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(B[0], B[1]))[0][1])
    hub.recovery.resume(link, 0)
    hub.table.share(B[0], "g", "t", True)
    message = Message("t", b"cmd", 2, False, None, "pub", 0.0, forward_id=MESSAGE_ID)
    assert hub.forward_shared("g", "t", message)  # the SHARED frame to B
    node_b.publish_shared_from_peer("g", "t", message)  # B handles it: its member's claim
    await store_b.flush()
    await _until(lambda: _payloads(there) == [b"cmd"])
    link.connection_lost(None)  # before B's SHARED_ACK: A re-dispatches it
    await store_a.flush()
    await store_a.flush()
    assert _payloads(here) == [] and store_a.duplicates == 1

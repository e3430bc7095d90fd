"""A re-sent QoS 2 PUBLISH routed again reaches a shared group once, not twice.

Two real nodes (``max_queued_writes: 0``) and a shared group (``$share/g/<topic>``) of two
QoS 2 members, clean or persistent. A persistent publisher sends a QoS 2 PUBLISH and has its
PUBREC; its connection then drops before its PUBREL (as when the PUBREC was lost with it), it
resumes its session and sends the PUBLISH again (DUP), as MQTT asks of a sender without a
PUBREC. The node that reads the re-send routes it once more when its claim read the packet id
back from Redis (``InboundMessageIds.route_again``), and picks a member of the group anew: a
member on that node first (``shared_delivery.shared_elsewhere``), the next one in round-robin order
otherwise (``publish_shared_from_peer``, ``deliver_shared``). Before, the group got the
message twice, through two members. Now a delivery of such a message claims the group in
Redis (``shared:seen:<message id>:<group>/<filter>``, ``core.shared_claims``): the second
routing finds the claim and delivers nothing.

* ``cross``: a member on each node, the re-send on node 2 (its own member first);
* ``forwarded``: both members on node 1, the re-send on node 2 (no member there: a SHARED
  frame to node 1, which picks the next member);
* ``same``: both members on node 1; the publisher moves to node 2 without re-sending, then
  back to node 1, whose claim reads the id back: node 1 routes it again and picks the next
  member.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.integration.cluster.test_resent_qos2_clean_subscribers import Setup, Subscriber, _until
from tests.support.raw_client import RawClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Pubcomp, Publish, Pubrec, Pubrel

pytestmark = pytest.mark.integration

GROUP = "g"


@pytest.fixture
def setup(redis_server: RedisServer, uid: str) -> Iterator[Setup]:
    with closing(Setup(redis_server, uid)) as started:
        yield started


def _members(setup: Setup, layout: str, kinds: str) -> list[Subscriber]:
    """The group's two members: on nodes (1, 2) for ``cross``, else both on node 1;
    ``kinds``: ``clean``, ``persistent`` or ``mixed`` (the first clean, the second not)."""
    nodes = (0, 1) if layout == "cross" else (0, 0)
    persistent = {"clean": (False, False), "persistent": (True, True), "mixed": (False, True)}
    shared = f"$share/{GROUP}/{setup.topic}"
    members = [
        Subscriber(setup.nodes[node].port, f"{setup.uid}-m{index}", shared, kept)
        for index, (node, kept) in enumerate(zip(nodes, persistent[kinds], strict=True))
    ]
    setup.clients.extend(member.client for member in members)
    return members


def _warm(setup: Setup, members: list[Subscriber]) -> None:
    """Publish QoS 0 from node 2 until a member hears it: node 2 knows the group (its own
    member, or node 1's SHARE)."""
    warmer = RawClient(setup.nodes[1].port)
    setup.clients.append(warmer)
    warmer.connect(f"{setup.uid}-warm")
    deadline = time.monotonic() + 15
    while not any(member.read(0.1) for member in members):
        assert time.monotonic() < deadline, "node 2 never routed to the group"
        warmer.send_packet(Publish(setup.topic, b"warm", qos=0))
    time.sleep(0.3)
    for member in members:
        member.read(0.2)
        member.payloads.clear()


def _send_once(setup: Setup, node: int) -> None:
    """The first PUBLISH, on ``node``: PUBREC, then the connection drops before PUBREL."""
    publisher = setup.publisher(node, clean_start=True)
    publisher.send_packet(Publish(setup.topic, b"command", qos=2, packet_id=7))
    _until(publisher, Pubrec(7))  # routed; its id recorded in Redis
    publisher.close()  # gone before its PUBREL: the PUBREC counts as lost


def _send_again(setup: Setup, node: int) -> None:
    """The PUBLISH again (DUP) on ``node``, and the rest of the exchange."""
    publisher = setup.publisher(node, clean_start=False)
    publisher.send_packet(Publish(setup.topic, b"command", qos=2, dup=True, packet_id=7))
    _until(publisher, Pubrec(7))
    publisher.send_packet(Pubrel(7))
    _until(publisher, Pubcomp(7))


def _received(members: list[Subscriber]) -> list[bytes]:
    for member in members:
        member.read(1.5)
    return [payload for member in members for payload in member.payloads]


@pytest.mark.parametrize("kinds", ["clean", "persistent", "mixed"])
def test_a_resent_qos2_publish_on_another_node_reaches_the_group_once(
    setup: Setup, kinds: str
) -> None:
    members = _members(setup, "cross", kinds)
    _warm(setup, members)
    _send_once(setup, 0)
    assert _received(members) == [b"command"]  # node 1's own member
    _send_again(setup, 1)  # node 2 routes it again: its own member first
    assert _received(members) == [b"command"], "a QoS 2 message delivered twice to the group"


@pytest.mark.parametrize("kinds", ["clean", "persistent"])
def test_a_resent_qos2_publish_forwarded_to_the_group_reaches_it_once(
    setup: Setup, kinds: str
) -> None:
    members = _members(setup, "forwarded", kinds)
    _warm(setup, members)
    _send_once(setup, 0)
    assert _received(members) == [b"command"]
    _send_again(setup, 1)  # node 2 has no member: a SHARED frame to node 1, the next member
    assert _received(members) == [b"command"], "a QoS 2 message delivered twice to the group"


@pytest.mark.parametrize("kinds", ["clean", "persistent"])
def test_a_resent_qos2_publish_routed_again_on_the_same_node_reaches_the_group_once(
    setup: Setup, kinds: str
) -> None:
    members = _members(setup, "same", kinds)
    _warm(setup, members)
    _send_once(setup, 0)
    assert _received(members) == [b"command"]
    # the session moves to node 2 and back, without the re-send: node 1's claim reads the
    # packet id back from Redis, so node 1 routes the re-send again
    setup.publisher(1, clean_start=False).close()
    _send_again(setup, 0)
    assert _received(members) == [b"command"], "a QoS 2 message delivered twice to the group"

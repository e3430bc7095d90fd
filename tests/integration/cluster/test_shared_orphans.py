"""A shared group whose only member is a dead node's persistent session keeps its messages.

Two real nodes. A persistent session (expiry 600) subscribes ``$share/g/<topic>`` (QoS 2) on
node 2 and disconnects (or stays connected); node 2 is killed (SIGKILL) and its lease
released (what the operator does for a dead pod). A publisher on node 1 then publishes QoS 1
and QoS 2 messages to the topic: the group has no live member anywhere, only that session,
whose owner is gone. A single node queues such a message for an offline persistent member
(``shared_delivery.deliver_shared``); before, node 1 knew nothing of node 2's shared persistent
subscriptions (DSUB announced only non-shared ones): the publisher got 0x10 and the messages
were lost (issue 12). Now node 1 appends them to the session's Redis queue
(``RouteTable.shared_orphans``): PUBACK 0x00, and the member, resumed on node 1, receives each
message exactly once. ``started``: the publisher and the member use a node 3 started after the
kill, which learns the dead owner's shared subscriptions from Redis (``orphan_loader``).
"""

from __future__ import annotations

import collections
import queue
import time

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, clear_dead_lease, routed
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=600)
MESSAGES = 10  # each QoS: 1 and 2
SETTLE_S = 3.0  # node 1 gives the killed node's link up (its port refuses) well within this


def _received(client: PahoClient, count: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.append(client.messages.get(timeout=0.5).payload)
        except queue.Empty:
            continue
    time.sleep(0.5)  # a duplicate would come right behind
    while not client.messages.empty():
        got.append(client.messages.get().payload)
    return got


@pytest.mark.parametrize("case", ["offline", "online", "started"])
def test_a_dead_nodes_persistent_shared_member_keeps_the_groups_messages(
    fresh_cluster: ClusterNodes, redis_server: RedisServer, uid: str, case: str
) -> None:
    connected = case == "online"
    nodes = fresh_cluster
    nodes.start_many(2)
    topic = f"{uid}/jobs"
    client_id = f"{uid}-member"
    member = PahoClient(nodes.port(2), client_id)
    member.connect(clean_start=True, properties=EXPIRY)
    member.subscribe(f"$share/g/{topic}", 2)
    routed(nodes.port(2), nodes.port(1), topic, member)  # node 1 knows the group
    if not connected:
        member.disconnect()
    nodes.kill(2)
    if connected:
        member.close()  # its node is gone (no reconnect to it)
    clear_dead_lease(redis_server, nodes.cluster, "node-2")
    time.sleep(SETTLE_S)
    survivor = 1
    if case == "started":
        survivor = 3
        nodes.start(3)
        nodes.wait_linked(2)
    publisher = PahoClient(nodes.port(survivor), f"{uid}-pub")
    publisher.connect()
    try:
        reasons = [
            publisher.publish(topic, f"q{qos}-{n}", qos=qos)
            for qos in (1, 2)
            for n in range(MESSAGES)
        ]
    finally:
        publisher.disconnect()
    assert reasons == [0] * (2 * MESSAGES), f"acks {reasons} (0x10: routed nowhere, lost)"
    again = PahoClient(nodes.port(survivor), client_id)
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=15)
    assert result.session_present
    try:
        counts = collections.Counter(_received(again, 2 * MESSAGES, timeout=15))
    finally:
        again.disconnect(props(PacketTypes.DISCONNECT, SessionExpiryInterval=0))
    expected = {f"q{qos}-{n}".encode() for qos in (1, 2) for n in range(MESSAGES)}
    assert set(counts) == expected, f"missing {sorted(expected - set(counts))}"
    assert all(count == 1 for count in counts.values()), f"duplicates: {counts}"

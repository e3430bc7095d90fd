"""A node link that drops and is resumed gets the peer's routes right again.

Two real ``xmq serve`` nodes on a real Redis; node-2 advertises its link through a proxy
(``tests.support.link_cut``), so the test can cut the link and keep it down while both nodes
hold their leases. Meanwhile a subscriber on node-2 drops one subscription and adds another;
the route deltas have no link to go over. When the link is restored, node-1 re-dials and the
link resumes: the added route must be there, and the removed one gone — messages for it must
not cross the link any more (before the fix they did: node-1 kept the stale route until the
subscription changed again).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed, wait_for
from tests.support.http_probe import metric, wait_port
from tests.support.link_cut import LinkCut
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

LEASE_TTL_S = 5.0  # a dropped link to a live node is re-dialled for the lease TTL + 2 s
PROXY_HOST = "127.0.0.2"


@pytest.fixture
def two_nodes(redis_server: RedisServer, uid: str) -> Iterator[tuple[ClusterNodes, LinkCut]]:
    nodes = ClusterNodes(redis_server, f"resume-{uid}", lease_ttl_s=LEASE_TTL_S, metrics=True)
    cut: LinkCut | None = None
    try:
        nodes.start(1)
        nodes.start(2, env={"XMQ_CLUSTER__ADVERTISE_HOST": PROXY_HOST})
        nodes.wait_linked(2)
        host, port = nodes.link_address(2)
        assert host == PROXY_HOST
        cut = LinkCut(PROXY_HOST, port, ("127.0.0.1", port))  # node-1 dials node-2 through it
        yield nodes, cut
    finally:
        if cut is not None:
            cut.close()
        nodes.stop_all()


def test_a_resumed_link_drops_the_routes_removed_while_it_was_down(
    two_nodes: tuple[ClusterNodes, LinkCut], uid: str
) -> None:
    nodes, cut = two_nodes
    metrics_1 = wait_port(nodes.nodes[1], "metrics")
    link_up = 'peer="node-2"'

    def counter(name: str, labels: str) -> float:
        return metric(metrics_1, f"xmq_cluster_{name}_total", labels)

    sub = PahoClient(nodes.port(2), f"{uid}-sub")
    pub = PahoClient(nodes.port(1), f"{uid}-pub")
    try:
        # a persistent session: its subscriptions also travel as DSUB (kept by node-1)
        sub.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
        sub.subscribe(f"{uid}/old/#", qos=1)
        routed(nodes.port(2), nodes.port(1), f"{uid}/old/x", sub)  # the link is up
        assert metric(metrics_1, "xmq_cluster_link_up", link_up) == 1

        cut.cut()
        wait_for(lambda: metric(metrics_1, "xmq_cluster_link_up", link_up) == 0, 10, "the drop")
        sub.unsubscribe(f"{uid}/old/#")  # removed while the link is down ...
        sub.subscribe(f"{uid}/new/#", qos=1)  # ... and added
        wait_for(lambda: cut.refused > 0, 10, "node-1 dialling node-2 again")
        assert metric(metrics_1, "xmq_cluster_link_up", link_up) == 0  # still down
        assert counter("link_events", 'event="resumed"') == 0

        cut.restore()
        wait_for(lambda: counter("link_events", 'event="resumed"') >= 1, 10, "the resume")
        wait_for(lambda: metric(metrics_1, "xmq_cluster_link_up", link_up) == 1, 10, "link up")
        assert counter("link_events", 'event="given_up"') == 0  # resumed, not orphaned
        routed(nodes.port(2), nodes.port(1), f"{uid}/new/x", sub)  # the added route is there
        # the old route and the session's old subscription are gone from node-1
        assert counter("link_events", 'event="stale_routes_dropped"') >= 2

        pub.connect()
        forwarded = counter("link_messages", 'direction="forwarded"')
        for n in range(20):
            pub.publish(f"{uid}/old/x", b"stale %d" % n, qos=1)  # nobody subscribes to it
        pub.publish(f"{uid}/new/x", b"last", qos=1)
        got = sub.expect(1)
        assert [(m.topic, m.payload) for m in got] == [(f"{uid}/new/x", b"last")]
        sub.expect_none(0.5)
        # only the new/x message crossed the link; the 20 old/x ones stayed on node-1
        assert counter("link_messages", 'direction="forwarded"') - forwarded == 1
    finally:
        pub.close()
        sub.close()

"""Delayed wills of persistent sessions on cluster nodes (real broker processes, real Redis):
the will of a client gone from node-1 reaches a subscriber on node-2 once its Will Delay
Interval has passed (not before); a client that resumes its session on node-2 first (a
cluster takeover) cancels it; a client that connects to node-2 with a clean start first ends
its session, so its will goes then (MQTT 5, 3.1.3.2.2: whichever of the delay and the end of
the session is first)."""

from __future__ import annotations

import time

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.paho_client import PahoClient, props

pytestmark = pytest.mark.integration

DELAY = 2
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=60)
WILL = props(PacketTypes.WILLMESSAGE, WillDelayInterval=DELAY)


def _client(port: int, client_id: str, topic: str, clean: bool = True) -> PahoClient:
    client = PahoClient(port, client_id)
    client.client.will_set(topic, client_id.encode(), qos=1, properties=WILL)
    client.connect(clean_start=clean, properties=EXPIRY)
    return client


@pytest.mark.spec("5:MQTT-3.1.3-9")
def test_a_delayed_will_goes_after_its_delay_unless_resumed_on_another_node(
    three_nodes: ClusterNodes, uid: str
) -> None:
    topic = f"{uid}/will"
    watcher = PahoClient(three_nodes.port(2), f"{uid}-w")
    watcher.connect()
    watcher.subscribe(topic, 1)
    routed(three_nodes.port(2), three_nodes.port(1), topic, watcher)
    try:
        gone = _client(three_nodes.port(1), f"{uid}-gone", topic)
        back = _client(three_nodes.port(1), f"{uid}-back", topic)
        ended = _client(three_nodes.port(1), f"{uid}-ended", topic)
        gone.drop()
        dropped = time.monotonic()  # the gone client's (each drop stops a paho thread: slow)
        back.drop()
        ended.drop()
        time.sleep(0.5)
        # resumed on node-2 before its delay: taken over from node-1, its will cancelled
        again = _client(three_nodes.port(2), f"{uid}-back", topic, clean=False)
        # a clean start on node-2 ends the session on node-1: its will goes (it was dropped)
        fresh = PahoClient(three_nodes.port(2), f"{uid}-ended")
        fresh.connect(clean_start=True, properties=EXPIRY)
        wills = watcher.expect(2, timeout=DELAY + 3)
        assert time.monotonic() - dropped >= DELAY - 0.1  # the gone client's: not before
        assert sorted(msg.payload for msg in wills) == [
            f"{uid}-ended".encode(),
            f"{uid}-gone".encode(),
        ]
        watcher.expect_none(DELAY + 1)  # the resumed session's will never went
        again.close()
        fresh.close()
    finally:
        watcher.close()

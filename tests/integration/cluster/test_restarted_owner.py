"""A killed node started again claims its persistent session back before it is linked.

Node 3 owns a persistent QoS 1 subscriber; node 1 publishes to it without pause. Node 3 is
killed (SIGKILL) and started again (a new epoch) and the subscriber reconnects to it at once.
Node 1 appends the messages for the dead run to the session's Redis queue; once the new run has
claimed the session, the appends are refused with the new run's id, and node 1 may not have
dialled the new run yet (it learns of it from the leases). Those messages wait for the link;
before they did, they were dropped until the link formed.
"""

from __future__ import annotations

import queue
import threading
import time

from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
STREAM_AFTER_RECONNECT_S = 3.0


def _numbers(client: PahoClient, until_end: bool, timeout: float) -> set[int]:
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            message = client.messages.get(timeout=0.2 if not until_end else 0.5)
        except queue.Empty:
            if until_end:
                continue
            return seen
        if message.payload == b"end":
            return seen
        seen.add(int(message.payload))
    return seen


def test_messages_for_a_session_claimed_by_a_restarted_node_wait_for_its_link(
    redis_server: RedisServer, uid: str
) -> None:
    # a 5 s lease: the others refresh the leases (and so dial a new run) once a second
    nodes = ClusterNodes(redis_server, f"restart-{uid}", lease_ttl_s=5.0)
    try:
        nodes.start_many(3)
        topic = f"{uid}/stream"
        client_id = f"{uid}-persistent"
        subscriber = PahoClient(nodes.port(3), client_id)
        subscriber.connect(clean_start=True, properties=EXPIRY)
        subscriber.subscribe(topic, 1)
        routed(nodes.port(3), nodes.port(1), topic, subscriber)
        publisher = PahoClient(nodes.port(1), f"{uid}-pub")
        publisher.connect()
        stop = threading.Event()
        sent: list[int] = []

        def stream() -> None:
            n = 0
            while not stop.is_set():
                publisher.publish(topic, f"{n}", qos=1, wait=n % 10 == 9, timeout=30)
                n += 1
                time.sleep(0.004)
            publisher.publish(topic, "end", qos=1, timeout=30)
            sent.append(n)

        thread = threading.Thread(target=stream, daemon=True)
        thread.start()
        time.sleep(0.5)
        nodes.kill(3)
        before = _numbers(subscriber, until_end=False, timeout=5)
        subscriber.close()
        nodes.start(3)  # a new run of node-3: it listens before the others have dialled it
        again = PahoClient(nodes.port(3), client_id)
        result = again.connect(clean_start=False, properties=EXPIRY, timeout=15)
        assert result.reason == 0
        assert result.session_present
        time.sleep(STREAM_AFTER_RECONNECT_S)  # the stream goes on while the links form
        stop.set()
        thread.join(timeout=30)
        assert sent, "the publisher did not finish"
        after = _numbers(again, until_end=True, timeout=30)
        missing = set(range(sent[0])) - before - after
        assert not missing, f"{len(missing)} of {sent[0]} missing: {sorted(missing)[:20]}"
        again.disconnect()
        publisher.disconnect()
    finally:
        nodes.stop_all()

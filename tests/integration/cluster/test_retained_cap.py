"""The retained cap in a cluster: each node checks its clients' retained messages against the
cluster-wide set it mirrors, and mirrors what other nodes accepted."""

from __future__ import annotations

import time

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.paho_client import PahoClient

pytestmark = pytest.mark.integration

QUOTA_EXCEEDED = 0x97
NO_MATCHING_SUBSCRIBERS = 0x10


def _retained_count(port: int, client_id: str, topic_filter: str, expected: int) -> int:
    """How many retained messages a new subscriber on `port` is sent (waits for `expected`)."""
    sub = PahoClient(port, client_id)
    sub.connect()
    try:
        sub.subscribe(topic_filter, 0)
        got: set[str] = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and len(got) <= expected:
            while not sub.messages.empty():
                got.add(sub.messages.get().topic)
            time.sleep(0.05)
        return len(got)
    finally:
        sub.disconnect()


def _wait_mirrored(port: int, uid: str, topic_filter: str, expected: int) -> None:
    deadline = time.monotonic() + 15
    n = 0
    while _retained_count(port, f"{uid}-w{n}", topic_filter, expected) != expected:
        assert time.monotonic() < deadline, f"node never held {expected} retained messages"
        n += 1


def test_each_node_holds_its_clients_to_the_cluster_wide_retained_cap(
    fresh_cluster: ClusterNodes, monkeypatch: pytest.MonkeyPatch, uid: str
) -> None:
    monkeypatch.setenv("XMQ_LIMITS__MAX_RETAINED_MESSAGES", "3")
    nodes = fresh_cluster
    nodes.start_many(2)
    first = PahoClient(nodes.port(1), f"{uid}-a")
    second = PahoClient(nodes.port(2), f"{uid}-b")
    first.connect()
    second.connect()
    try:
        for n in range(3):
            assert first.publish(f"{uid}/{n}", b"v", retain=True) == NO_MATCHING_SUBSCRIBERS
        assert first.publish(f"{uid}/3", b"v", retain=True) == QUOTA_EXCEEDED
        _wait_mirrored(nodes.port(2), uid, f"{uid}/#", 3)
        # node 2 mirrors node 1's three: its own client is held to the same cap
        assert second.publish(f"{uid}/4", b"v", retain=True) == QUOTA_EXCEEDED
        assert second.publish(f"{uid}/0", b"replaced", retain=True) == NO_MATCHING_SUBSCRIBERS
        assert first.publish(f"{uid}/1", b"", retain=True) == NO_MATCHING_SUBSCRIBERS  # clear
        _wait_mirrored(nodes.port(2), uid, f"{uid}/#", 2)
        assert second.publish(f"{uid}/4", b"v", retain=True) == NO_MATCHING_SUBSCRIBERS
    finally:
        first.disconnect()
        second.disconnect()
    # a node started later loads the cluster's set from Redis: still three
    nodes.start(3)
    nodes.wait_linked(3)
    assert _retained_count(nodes.port(3), f"{uid}-c", f"{uid}/#", 3) == 3

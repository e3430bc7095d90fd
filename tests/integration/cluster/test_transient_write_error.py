"""A transient error while handling a packet: the durable record of a QoS 1 PUBLISH cannot be
written (Redis answers READONLY, a replica after a failover, past ``write_retry_s``). MQTT 3.1.1
has no error code for it: the connection the PUBLISH came on is closed without an ack
[MQTT-4.8.0-2]; an MQTT 5 publisher gets PUBACK 0x80. A real node and a real Redis, turned
into a replica of nothing and back."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.raw_client import RawClient, connected, subscribed
from tests.support.redis_server import RedisServer, running_redis
from xmq.codec.packets import MQTT_3_1_1, Disconnect, Pingreq, Pingresp, Puback, Publish
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def _readonly(redis: RedisServer, on: bool) -> None:
    client = redis.client()
    try:
        if on:  # a replica of a master that is not there: every write is refused READONLY
            client.replicaof("127.0.0.1", 1)
        else:
            client.replicaof("NO", "ONE")
    finally:
        client.close()


@pytest.mark.spec("3:MQTT-4.8.0-2")
def test_a_record_that_cannot_be_written_closes_a_v311_connection(
    own_redis: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(
        own_redis, f"transient-{uid}", lease_ttl_s=60, persistence="  write_retry_s: 0.5\n"
    )
    opened: list[RawClient] = []
    try:
        nodes.start(1)
        nodes.wait_linked(1)
        port = nodes.port(1)
        sub = RawClient(port)
        props = Properties(session_expiry_interval=300)
        assert sub.connect(f"{uid}-s", properties=props).reason_code == 0
        subscribed(sub, f"{uid}/t", 1)
        sub.send_packet(Disconnect(0))  # a persistent session: its messages are recorded
        sub.close()
        v311 = connected(port, f"{uid}-p4", version=MQTT_3_1_1)
        v5 = connected(port, f"{uid}-p5")
        idle = connected(port, f"{uid}-idle", version=MQTT_3_1_1)
        opened.extend((v311, v5, idle))
        v311.send_packet(Publish(f"{uid}/t", b"ok", qos=1, packet_id=1))
        assert v311.read_packet() == Puback(1)  # recorded: acknowledged
        _readonly(own_redis, True)
        try:
            started = time.monotonic()
            v311.send_packet(Publish(f"{uid}/t", b"lost", qos=1, packet_id=2))
            v5.send_packet(Publish(f"{uid}/t", b"lost5", qos=1, packet_id=3))
            assert v311.read_until_closed(timeout=20) == []  # closed, no PUBACK
            closed_after = time.monotonic() - started
            refused = v5.read_packet(timeout=20)
            assert isinstance(refused, Puback) and (refused.packet_id, refused.reason_code) == (
                3,
                0x80,
            )
        finally:
            _readonly(own_redis, False)
        assert closed_after < 30  # the write was given up (write_retry_s), not the lease lost
        idle.send_packet(Pingreq())  # only the connection of that packet was closed
        assert isinstance(idle.read_packet(), Pingresp)
    finally:
        for raw in opened:
            raw.close()
        nodes.stop_all()

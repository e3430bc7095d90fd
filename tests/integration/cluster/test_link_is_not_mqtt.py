"""A node connects out only to Redis, PostgreSQL and its peers' cluster links; the links speak
XMQ's own framing, not MQTT, so a node is never an MQTT client of another server and
MQTT-7.0.0-1 (a server that connects out to other servers conforms as client too) does not
bind it. This checks the premise on a real node: its link port, from its lease in Redis, gives
an MQTT CONNECT no CONNACK and closes."""

from __future__ import annotations

import socket

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.raw_client import RawClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import MQTT_3_1_1, Connect
from xmq.codec.writer import encode
from xmq.contract import ClusterKeys, NodeLease

pytestmark = pytest.mark.integration


@pytest.mark.spec("3:MQTT-7.0.0-1")
def test_a_nodes_outbound_link_is_not_an_mqtt_connection(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"notmqtt-{uid}")
    try:
        nodes.start(1)
        nodes.wait_linked(1)
        client = redis_server.client()
        try:
            raw = client.get(ClusterKeys(nodes.cluster).lease("node-1"))
            assert isinstance(raw, bytes)
            lease = NodeLease.from_json(raw)
        finally:
            client.close()
        host, _, port = lease.address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as link:
            link.sendall(encode(Connect(client_id=uid), MQTT_3_1_1))
            answer = b""
            while chunk := link.recv(4096):
                answer += chunk
            assert not answer.startswith(b"\x20")  # no CONNACK: the link is not MQTT
        mqtt = RawClient(nodes.port(1), version=MQTT_3_1_1)  # its MQTT listener is
        try:
            assert mqtt.connect(uid).reason_code == 0
        finally:
            mqtt.close()
    finally:
        nodes.stop_all()

"""The retained cap: refused where a client publishes, mirrored where another node accepted."""

from __future__ import annotations

from tests.support.sink_link import connect_client
from xmq.codec.packets import Puback, Publish
from xmq.core.broker import Broker
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


async def test_a_node_refuses_its_clients_at_the_cap_but_mirrors_its_peers() -> None:
    broker = Broker(CoreSettings(max_retained_messages=2))
    conn, link = await connect_client(broker, "publisher")
    for n in range(3):
        conn.handle(Publish(topic=f"r/{n}", payload=b"v", qos=1, retain=True, packet_id=n + 1))
    acks = [p for p in link.packets() if isinstance(p, Puback)]
    assert [a.reason_code for a in acks] == [0x10, 0x10, 0x97]
    assert sorted(topic for topic, _ in broker.retained.items()) == ["r/0", "r/1"]
    assert broker.stats.caps_hit == {"retained_messages": 1}
    # another node accepted r/9 against the same cluster-wide set (a race at the cap): the
    # copies must agree, so this node stores it rather than diverge
    broker.publish_from_peer(Message("r/9", b"v", 1, True, None, "elsewhere", 0.0))
    assert "r/9" in broker.retained
    # and its own clients stay refused until the set shrinks below the cap
    conn.handle(Publish(topic="r/3", payload=b"v", qos=1, retain=True, packet_id=9))
    conn.handle(Publish(topic="r/9", payload=b"", qos=1, retain=True, packet_id=10))
    conn.handle(Publish(topic="r/0", payload=b"", qos=1, retain=True, packet_id=11))
    conn.handle(Publish(topic="r/3", payload=b"v", qos=1, retain=True, packet_id=12))
    acks = [p for p in link.packets() if isinstance(p, Puback)]
    assert [a.reason_code for a in acks] == [0x97, 0x10, 0x10, 0x10]
    assert sorted(topic for topic, _ in broker.retained.items()) == ["r/1", "r/3"]

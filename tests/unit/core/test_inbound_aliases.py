"""A connection's inbound topic-alias table is made on the first aliased PUBLISH (an idle
connection holds none) and then resolves and checks aliases as before."""

from __future__ import annotations

from xmq.codec.packets import Connect, Publish
from xmq.codec.properties import Properties
from xmq.core.auth_ports import AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.connection_states import CLOSED, CONNECTED
from xmq.core.settings import CoreSettings

from .test_login_eager import _conn


def _aliased(topic: str, alias: int) -> Publish:
    props = Properties()
    props.topic_alias = alias
    return Publish(topic=topic, payload=b"x", qos=0, properties=props)


def _disconnect_reason(out: bytes | bytearray) -> int:
    """The reason code of the DISCONNECT written after the CONNACK."""
    disconnect = out[out[1] + 2 :]
    assert disconnect[0] == 0xE0, bytes(out)
    return disconnect[2]


async def test_the_table_is_made_on_the_first_alias_and_then_resolves() -> None:
    conn, link = _conn(Broker(CoreSettings()), AnonymousAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=5))
    conn.handle(Publish(topic="plain", payload=b"x", qos=0))
    tables = [conn.in_aliases]
    conn.handle(_aliased("t/1", 1))
    tables.append(conn.in_aliases)
    assert tables[0] is None and tables[1] is not None and conn.state == CONNECTED
    conn.handle(_aliased("", 1))  # the alias alone names t/1
    assert conn.state == CONNECTED
    conn.handle(_aliased("", 2))  # never set: a protocol error (0x82)
    assert conn.state == CLOSED and _disconnect_reason(link.out) == 0x82


async def test_an_alias_above_the_maximum_closes_with_0x94() -> None:
    conn, link = _conn(Broker(CoreSettings()), AnonymousAuthenticator())
    conn.handle(Connect(client_id="a", protocol_version=5))
    limit = conn.broker.settings.limits.topic_alias_maximum
    conn.handle(_aliased("t/1", limit + 1))
    assert conn.state == CLOSED and _disconnect_reason(link.out) == 0x94

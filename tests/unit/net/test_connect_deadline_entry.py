"""The listener's connect deadline leaves the broker's wheel when the login is accepted (not
when its slot comes round, a connect-timeout later), and stays for a login that is not."""

from __future__ import annotations

import asyncio

from tests.support.recording_transport import RecordingTransport
from xmq.codec.packets import Connect
from xmq.codec.writer import encode
from xmq.config import ListenerConfig
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.connection_states import AWAIT_CONNECT, CLOSED, CONNECTED
from xmq.core.settings import CoreSettings
from xmq.net.admission import ListenerGate
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol
from xmq.net.listeners import ListenerSet


def _accepted(listeners: ListenerSet, spec: ListenerConfig) -> MqttClientProtocol:
    """A connection as the listener's server makes it, its transport up."""
    loop = asyncio.get_running_loop()
    listeners._scheduler = FlushScheduler(loop)
    gate = ListenerGate(spec.name, 0, 0, 0, loop.time())
    client = listeners._new_client(spec, gate, None)
    client.connection_made(RecordingTransport())  # type: ignore[arg-type]
    return client


def _listeners(broker: Broker, allow_anonymous: bool) -> ListenerSet:
    return ListenerSet(broker, AnonymousAuthenticator(allow_anonymous), AllowAll(), 1 << 20)


async def test_an_accepted_login_leaves_only_its_keep_alive_in_the_wheel() -> None:
    broker = Broker(CoreSettings())
    client = _accepted(_listeners(broker, True), ListenerConfig(connect_timeout_s=10))
    assert client.wheel_slot and broker.deadlines.count == 1  # the connect deadline
    client.data_received(encode(Connect(client_id="a", protocol_version=5, keep_alive=30), 5))
    assert client.conn.state == CONNECTED
    assert client.wheel_slot == 0  # the connect deadline is gone
    assert client.conn.wheel_slot and broker.deadlines.count == 1  # its keep alive only


async def test_an_accepted_login_without_keep_alive_leaves_nothing_in_the_wheel() -> None:
    broker = Broker(CoreSettings())
    client = _accepted(_listeners(broker, True), ListenerConfig(connect_timeout_s=10))
    client.data_received(encode(Connect(client_id="a", protocol_version=4, keep_alive=0), 4))
    assert client.conn.state == CONNECTED
    assert client.wheel_slot == 0 and broker.deadlines.count == 0


async def test_a_refused_or_missing_login_keeps_its_connect_deadline() -> None:
    broker = Broker(CoreSettings())
    listeners = _listeners(broker, False)  # anonymous clients refused
    waiting = _accepted(listeners, ListenerConfig(connect_timeout_s=10))
    refused = _accepted(listeners, ListenerConfig(connect_timeout_s=10))
    refused.data_received(encode(Connect(client_id="b", protocol_version=5), 5))
    assert waiting.conn.state == AWAIT_CONNECT and waiting.wheel_slot
    assert refused.conn.state == CLOSED and refused.wheel_slot  # until its connection is lost
    refused.connection_lost(None)
    assert refused.wheel_slot == 0 and broker.deadlines.count == 1

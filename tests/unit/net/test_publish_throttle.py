"""The publish-rate throttle pauses reading, never drops, and never overrides a core pause."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from tests.support.virtual_broker import on_virtual_loop, run_until
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import MQTT_5, Connect, Publish
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import FlushScheduler
from xmq.net.publish_throttle import ThrottledClientProtocol


class RecordingTransport:
    """The few transport calls the protocol makes, recorded."""

    def __init__(self) -> None:
        self.paused = False
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_paused(self) -> bool:
        return self.paused


async def _connected(
    rate: float, burst: int
) -> tuple[ThrottledClientProtocol, RecordingTransport, VirtualLoop]:
    """A throttled client logged in on a broker whose clock and timers are virtual."""
    broker = Broker(CoreSettings())
    loop = on_virtual_loop(broker)
    scheduler = FlushScheduler(cast(asyncio.AbstractEventLoop, loop))
    client = ThrottledClientProtocol(
        broker, AnonymousAuthenticator(), AllowAll(), scheduler, 65536, rate, burst
    )
    transport = RecordingTransport()
    client.connection_made(cast(asyncio.Transport, transport))
    client.data_received(
        encode(Connect(protocol_version=MQTT_5, client_id="throttled", clean_start=True), MQTT_5)
    )
    for _ in range(20):
        await asyncio.sleep(0)
        loop.run_turn()
        if client.conn.session is not None:
            break
    assert client.conn.session is not None and not transport.is_paused()
    return client, transport, loop


def _publishes(count: int) -> bytes:
    return b"".join(
        encode(Publish(topic="t", payload=b"x", qos=1, packet_id=n + 1), MQTT_5)
        for n in range(count)
    )


async def test_over_the_rate_pauses_then_resumes() -> None:
    client, transport, loop = await _connected(rate=100, burst=5)
    stats = client.conn.broker.stats
    client.data_received(_publishes(5))
    assert not transport.is_paused()  # within the burst
    client.data_received(_publishes(5))
    assert stats.messages_received == 10  # processed, not dropped
    assert transport.is_paused()
    run_until(loop, loop.now + 0.045, step=0.005)
    assert transport.is_paused()  # 5 tokens of debt at 100/s = 50 ms: not repaid yet
    run_until(loop, loop.now + 0.01, step=0.005)
    assert not transport.is_paused()


async def test_throttle_does_not_resume_what_the_core_paused() -> None:
    client, transport, loop = await _connected(rate=100, burst=1)
    client.data_received(_publishes(3))
    assert transport.is_paused()
    client.pause_reading()  # the core holds the reader too (e.g. persistence window)
    run_until(loop, loop.now + 0.05, step=0.005)  # the throttle's debt is repaid
    assert transport.is_paused()  # the throttle's timer must not resume it
    client.resume_reading()
    assert not transport.is_paused()


async def test_core_resume_waits_for_the_throttle() -> None:
    client, transport, loop = await _connected(rate=50, burst=1)
    client.data_received(_publishes(4))
    assert transport.is_paused()
    client.pause_reading()
    client.resume_reading()  # the core is done, the throttle is not
    assert transport.is_paused()
    run_until(loop, loop.now + 0.1, step=0.005)
    assert not transport.is_paused()

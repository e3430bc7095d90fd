"""What a connect asks of its transport: an in-memory login neither pauses reading (under
uvloop a pause and a resume cost an ``epoll_ctl``, batched into an ``io_uring_enter`` system
call, each) nor asks for the peer's address; a login that waits does pause reading, and an
authenticator that uses the address gets it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.support.recording_transport import RecordingTransport
from xmq.codec.packets import Connect, Pingreq
from xmq.codec.writer import encode
from xmq.core.auth_ports import (
    AllowAll,
    AnonymousAuthenticator,
    AuthDecision,
    Authenticator,
    Credentials,
)
from xmq.core.broker import Broker
from xmq.core.connection_states import AUTHENTICATING, CONNECTED
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol

_CONNECT = encode(Connect(client_id="dev-1", protocol_version=5, keep_alive=60), 5)
_PINGREQ = encode(Pingreq(), 5)


class _CallsTransport(RecordingTransport):
    """Records the calls a connect may make of its transport besides writing."""

    def __init__(self, peername: object = ("10.1.2.3", 4567)) -> None:
        super().__init__()
        self.peername = peername
        self.calls: list[str] = []

    def get_extra_info(self, name: str, default: object = None) -> object:
        self.calls.append(f"get_extra_info:{name}")
        return self.peername if name == "peername" else default

    def pause_reading(self) -> None:
        self.calls.append("pause_reading")

    def resume_reading(self) -> None:
        self.calls.append("resume_reading")


class _PeerAuthenticator(AnonymousAuthenticator):
    """Inline, like the default, but reads the address (as the brute-force guards do)."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[str] = []

    def decide(self, credentials: Credentials) -> AuthDecision:
        self.peers += [credentials.peer, credentials.peer]
        return AuthDecision(0, credentials.username)

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        return self.decide(credentials)


class _WaitingAuthenticator(AnonymousAuthenticator):
    """Waits for the test to let it decide (an account store's round trip)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        await self.answer.wait()
        return AuthDecision(0, credentials.username)


def _client(
    authenticator: Authenticator, transport: _CallsTransport
) -> tuple[MqttClientProtocol, Broker]:
    broker = Broker(CoreSettings())
    scheduler = FlushScheduler(asyncio.get_running_loop())
    client = MqttClientProtocol(broker, authenticator, AllowAll(), scheduler, 1 << 20)
    client.connection_made(transport)  # type: ignore[arg-type]
    return client, broker


async def _until(condition: Callable[[], object], turns: int = 100) -> None:
    """Let the loop turn (no clock involved) until ``condition`` holds."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached in {turns} loop turns")


async def test_an_in_memory_login_neither_pauses_reading_nor_asks_the_peer() -> None:
    transport = _CallsTransport()
    client, _ = _client(AnonymousAuthenticator(), transport)
    client.data_received(_CONNECT + _PINGREQ)
    assert client.conn.state == CONNECTED
    await _until(lambda: transport.sent)
    assert transport.sent[0] == 0x20 and transport.sent.endswith(b"\xd0\x00")
    assert transport.calls == []


async def test_a_login_that_waits_pauses_reading_until_it_is_accepted() -> None:
    transport = _CallsTransport()
    authenticator = _WaitingAuthenticator()
    client, _ = _client(authenticator, transport)
    client.data_received(_CONNECT + _PINGREQ)  # the PINGREQ is held, then replayed
    assert client.conn.state == AUTHENTICATING
    assert transport.calls == ["pause_reading"]
    await asyncio.sleep(0)
    assert client.conn.state == AUTHENTICATING and transport.sent == b""
    authenticator.answer.set()
    await _until(lambda: transport.sent.endswith(b"\xd0\x00"))
    assert client.conn.state == CONNECTED and transport.sent[0] == 0x20
    assert transport.calls == ["pause_reading", "resume_reading"]


async def test_an_authenticator_that_uses_the_peer_gets_it_asked_once() -> None:
    transport = _CallsTransport()
    authenticator = _PeerAuthenticator()
    client, _ = _client(authenticator, transport)
    client.data_received(_CONNECT)
    assert client.conn.state == CONNECTED
    assert authenticator.peers == ["10.1.2.3:4567", "10.1.2.3:4567"]
    assert client.peer == "10.1.2.3:4567"
    assert transport.calls == ["get_extra_info:peername"]


async def test_a_peer_named_by_the_listener_is_not_asked_of_the_transport() -> None:
    transport = _CallsTransport()
    authenticator = _PeerAuthenticator()
    client, _ = _client(authenticator, transport)
    client.peer = "192.0.2.7:1883"  # a PROXY header's source
    client.data_received(_CONNECT)
    assert authenticator.peers == ["192.0.2.7:1883", "192.0.2.7:1883"]
    assert transport.calls == []


async def test_an_unknown_peer_is_a_dash() -> None:
    transport = _CallsTransport(peername=None)  # e.g. the socket already reset
    client, _ = _client(AnonymousAuthenticator(), transport)
    assert client.peer == "-"
    assert client.peer == "-" and transport.calls == ["get_extra_info:peername"]


def test_credentials_take_the_peer_as_text_or_ask_for_it_once() -> None:
    asked: list[int] = []

    def peer() -> str:
        asked.append(1)
        return "10.0.0.9:1"

    lazy = Credentials("c", None, None, peer, 5)
    assert asked == []
    assert lazy.peer == "10.0.0.9:1" and lazy.peer == "10.0.0.9:1" and asked == [1]
    assert Credentials("c", None, b"secret", "h:1", 4).peer == "h:1"
    assert "secret" not in repr(Credentials("c", "u", b"secret", "h:1", 4))

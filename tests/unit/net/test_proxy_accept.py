"""The PROXY listener's refusals: what they log (a burst of them must not cost the loop)."""

from __future__ import annotations

import logging
import socket

import pytest

from xmq.net.proxy_accept import ProxyProtocolServer


async def _admit(first_bytes: bytes, caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """One accepted connection whose peer sends ``first_bytes`` and closes."""

    async def handoff(sock: socket.socket, peer: str | None) -> None:
        raise AssertionError("no header: nothing to hand off")

    listener = socket.socket()
    server = ProxyProtocolServer(listener, True, handoff, timeout_s=5.0)
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.sendall(first_bytes)
    peer.close()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="xmq.net"):
        await server._admit(ours)
    listener.close()
    assert ours.fileno() == -1  # closed
    return [(record.levelno, record.getMessage()) for record in caplog.records]


async def test_a_peer_that_closes_before_its_header_is_logged_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert await _admit(b"PROXY TCP4 127.0.0.1 ", caplog) == [
        (logging.DEBUG, "no PROXY header: closed before the PROXY header")
    ]


async def test_a_connection_without_the_required_header_is_refused_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    [(level, message)] = await _admit(b"\x10\x10\x00\x04MQTT", caplog)
    assert level == logging.INFO and message.startswith("refused connection: ")

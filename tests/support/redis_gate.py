"""A TCP proxy in front of a test Redis that can stall one node's writes at a chosen command.

A broker pointed at the gate talks to Redis normally until ``hold`` is armed: from the first
chunk a connection sends that matches the pattern on, that connection's commands are held (not
passed on, not answered), as for a node whose link to Redis stalls right there. When the node is
killed its connections close and the held commands never reach Redis: the kill -9 landed
between handing a packet to the client and Redis answering the command that records it.
"""

from __future__ import annotations

import re
import socket
import threading

from tests.support.tcp_proxy import TcpProxy, shut


class RedisGate(TcpProxy):
    """Listens on a free loopback port; ``url`` is what the broker is given."""

    def __init__(self, redis_host: str, redis_port: int) -> None:
        self.pattern: re.Pattern[bytes] | None = None
        self.held = threading.Event()  # set once a connection is held
        super().__init__((redis_host, redis_port))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def hold(self, pattern: bytes) -> None:
        """Hold each connection from its first chunk matching ``pattern`` (a regex) on."""
        self.pattern = re.compile(pattern)

    def forward(self, client: socket.socket, upstream: socket.socket) -> None:
        held = False
        tail = b""
        try:
            while data := client.recv(65536):
                pattern = self.pattern
                if not held and pattern is not None and pattern.search(tail + data):
                    held = True
                    self.held.set()
                tail = data[-512:]
                if not held:
                    upstream.sendall(data)
        except OSError:
            pass
        finally:
            shut(upstream)  # the node is gone: what it held never reaches Redis
            shut(client)

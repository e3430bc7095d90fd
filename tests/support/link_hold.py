"""A TCP proxy in front of one node's link port that can hold what one peer sends it.

The node advertises the proxy's address (``cluster.advertise_host``: another loopback address,
same port), so its peers dial through it. The dialling peer is known by its HELLO (its node id
is in the first bytes it sends). ``hold`` stops passing that peer's bytes on (the kernel buffers
them, the link stays up); ``release`` passes them on again, in order: as a peer whose frames are
late (a slow loop, a congested network) while the other nodes' frames arrive on time.
"""

from __future__ import annotations

import socket
import threading

from tests.support.tcp_proxy import TcpProxy, shut


class LinkHold(TcpProxy):
    """Listens on ``(host, port)``, forwards to ``target``; holds ``peer``'s bytes on ``hold``."""

    def __init__(self, host: str, port: int, target: tuple[str, int], peer: str) -> None:
        self.peer = peer.encode()
        self.flowing = threading.Event()
        self.flowing.set()
        self.held_bytes = 0  # bytes of the peer's that waited for ``release``
        super().__init__(target, host, port)

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.release()  # a held pump ends with its sockets
        super().close()

    def forward(self, client: socket.socket, upstream: socket.socket) -> None:
        held = False
        try:
            while data := client.recv(65536):
                held = held or self.peer in data  # its HELLO names it
                if held and not self.flowing.is_set():
                    self.held_bytes += len(data)
                    self.flowing.wait()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            shut(upstream)
            shut(client)

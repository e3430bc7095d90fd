"""A TCP proxy in front of one node's link port that can cut the link and keep it down.

The node advertises the proxy's address (``cluster.advertise_host``: another loopback address,
same port), so its peers dial through it. ``cut`` closes every connection through it and
refuses to carry new ones (each is accepted, so the port still looks alive, and closed at
once): the nodes and their leases stay up, only their link is gone, as for a dropped
connection that the dialling node cannot re-establish yet. ``restore`` carries new ones again.
"""

from __future__ import annotations

from tests.support.tcp_proxy import TcpProxy


class LinkCut(TcpProxy):
    """Listens on ``(host, port)`` and forwards to ``target``."""

    def __init__(self, host: str, port: int, target: tuple[str, int]) -> None:
        self.down = False
        self.refused = 0  # connections closed while the link was cut
        super().__init__(target, host, port)

    def admit(self) -> bool:
        if self.down:
            self.refused += 1
        return not self.down

    def cut(self) -> None:
        """Close every connection through the proxy; close new ones until ``restore``."""
        with self._lock:
            self.down = True
        self.drop_connections()

    def restore(self) -> None:
        with self._lock:
            self.down = False

"""A TCP proxy in front of one node's link port that can cut the link and keep it down.

The node advertises the proxy's address (``cluster.advertise_host``: another loopback address,
same port), so its peers dial through it. ``cut`` closes every connection through it and
refuses to carry new ones (each is accepted, so the port still looks alive, and closed at
once): the nodes and their leases stay up, only their link is gone, as for a dropped
connection that the dialling node cannot re-establish yet. ``restore`` carries new ones again.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class LinkCut:
    """Listens on ``(host, port)`` and forwards to ``target``."""

    def __init__(self, host: str, port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server((host, port))
        self.down = False
        self.refused = 0  # connections closed while the link was cut
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Close every connection through the proxy; close new ones until ``restore``."""
        with self._lock:
            self.down = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _shut(sock)

    def restore(self) -> None:
        with self._lock:
            self.down = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs, self._pairs = self._pairs, []
        self.listener.close()
        for pair in pairs:
            for sock in pair:
                _shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed or self.down:
                    self.refused += 1
                    _shut(client)
                    if self._closed:
                        return
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                _shut(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _shut(sink)
        _shut(source)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()

"""A threaded TCP proxy for fault tests: each accepted connection is paired with one to the
target and bytes are pumped both ways. Subclasses decide what is admitted (``admit``) and what
the client side's bytes do (``forward``) and the target's (``backward``); ``close`` shuts
every socket."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Listens on ``(host, port)`` (port 0: any free) and forwards to ``target``."""

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self.listener = socket.create_server((host, port))
        self.port: int = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def admit(self) -> bool:
        """Whether a new connection is carried (called under the lock; False: closed at once)."""
        return True

    def forward(self, client: socket.socket, upstream: socket.socket) -> None:
        """Pump the client's bytes to the target (the default: all of them)."""
        pump(client, upstream)

    def backward(self, upstream: socket.socket, client: socket.socket) -> None:
        """Pump the target's bytes to the client (the default: all of them)."""
        pump(upstream, client)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs, self._pairs = self._pairs, []
        self.listener.close()
        for pair in pairs:
            for sock in pair:
                shut(sock)

    def drop_connections(self) -> None:
        """Close every connection carried so far (both sides see it end)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                admitted = not self._closed and self.admit()
            if not admitted:
                shut(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                shut(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self.forward, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self.backward, args=(upstream, client), daemon=True).start()


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either ends; then close both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        shut(sink)
        shut(source)


def shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()

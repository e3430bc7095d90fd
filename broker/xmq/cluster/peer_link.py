"""One TCP link to another node: frames in, frames out batched once per loop tick."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, cast

from xmq.cluster.link_frames import FrameDecoder, FrameError, Kind, hello

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub

log = logging.getLogger("xmq.cluster.link")


class PeerLink(asyncio.Protocol):
    """A node link; the hub learns the peer's node id and epoch from its HELLO."""

    __slots__ = (
        "_decoder",
        "_out",
        "_scheduled",
        "closed",
        "hub",
        "peer_epoch",
        "peer_node",
        "transport",
    )

    def __init__(self, hub: ClusterHub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.peer_node = ""
        self.peer_epoch = 0
        self.closed = False
        self._decoder = FrameDecoder()
        self._out: list[bytes] = []
        self._scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        identity = self.hub.identity
        self.send(hello(identity.node_id, identity.epoch))

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
            for kind, body in frames:
                if not self.peer_node:
                    if kind != Kind.HELLO:
                        raise FrameError("first frame must be HELLO")
                    self.hub.link_hello(self, body)
                    if self.closed:
                        return
                else:
                    self.hub.handle_frame(self, kind, body)
        except (FrameError, UnicodeDecodeError, ValueError) as error:
            log.warning("link %s: %s", self.peer_node or "?", error)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.hub.link_lost(self)

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        out, self._out = self._out, []
        if self.transport is not None and not self.closed and out:
            self.transport.writelines(out)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush()
            self.closed = True
            self.transport.close()

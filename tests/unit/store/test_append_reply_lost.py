"""An orphan append whose reply is lost is not queued twice when the batcher sends it again.

A message published on this node for a persistent session of a dead owner is appended to the
session's Redis queue (``APPEND_IF_OWNER``). When the connection to Redis dies after Redis ran
the script but before its reply came back, the batcher sends it again on a new connection (a
durable write survives a lost connection). A message forwarded by another node carries its
forward id and the script skips a second copy; one published here had no id, and was queued
twice: a QoS 2 duplicate. Now every append carries an id (``<node>/<epoch>/a<n>``).
Played with the real store on a real Redis, behind a proxy that swallows the reply and cuts
the connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest

from tests.support.node_leases import write_lease
from tests.support.redis_server import RedisServer, running_redis
from tests.support.tcp_proxy import TcpProxy, shut
from xmq.contract import ClusterKeys
from xmq.contract.message_record import decode_record
from xmq.contract.session_scripts import APPEND_IF_OWNER
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-reply-lost")
A = ("a-0", 7)


class ReplyCut(TcpProxy):
    """Passes everything until a chunk the client sends contains ``marker``: that chunk still
    reaches Redis, but from then on nothing comes back on that connection, and it is cut
    ``after_s`` later (Redis has run the command; its reply is lost)."""

    def __init__(self, target: tuple[str, int], marker: bytes, after_s: float = 0.3) -> None:
        self.marker = marker
        self.after_s = after_s
        self.cut = threading.Event()
        self._silenced: set[int] = set()
        super().__init__(target)

    def forward(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                hit = not self.cut.is_set() and self.marker in data
                if hit:
                    self._silenced.add(id(upstream))
                upstream.sendall(data)
                if hit:
                    time.sleep(self.after_s)
                    self.cut.set()
                    break
        except OSError:
            pass
        shut(client)
        shut(upstream)

    def backward(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(65536):
                if id(upstream) not in self._silenced:
                    client.sendall(data)
        except OSError:
            pass
        shut(client)
        shut(upstream)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


async def test_a_local_message_appended_again_after_a_lost_reply_is_queued_once(
    server: RedisServer,
) -> None:
    sync = server.client()
    sync.flushall()
    sync.set(KEYS.session_owner("sub"), '{"node_id":"b-0","epoch":4}')  # b-0's run is dead
    write_lease(sync, KEYS, *A)  # the appending run holds its lease
    sync.script_load(APPEND_IF_OWNER)  # loaded at the node's start: the first send runs it
    proxy = ReplyCut((server.host, server.port), b"published-here-once")
    batcher = RedisBatcher(f"redis://127.0.0.1:{proxy.port}/0")
    await batcher.start()
    store = RedisSessionStore(batcher, KEYS, NodeIdentity(*A, online=True), {}, lambda: 0.0)
    try:
        message = Message("t", b"published-here-once", 2, False, None, "pub", 0.0)
        assert not message.forward_id  # published on this node: no forward id of its own
        moved: list[str] = []
        store.append_if_owner("sub", ("b-0", 4), message, 2, False, lambda n, _: moved.append(n))
        await store.flush()
        assert proxy.cut.is_set(), "the reply was not cut: the test did not play the fault"
        raw = cast("list[bytes]", sync.lrange(KEYS.session_queue("sub"), 0, -1))
        payloads = [decode_record(item).payload for item in raw]
        assert payloads == [b"published-here-once"], f"queued {len(payloads)} times"
        assert moved == []
    finally:
        await batcher.close()
        proxy.close()
        sync.close()

"""The node links: one TCP link per pair of nodes, route sharing, forwarding, takeovers.

Implements ``core.cluster_ports.ClusterRouter``. The node with the smaller id dials (peer
addresses come from the leases); both sides send HELLO, then a snapshot of their routes,
shared groups and persistent subscriptions, then deltas. A publish crosses to each remote node
at most once. When a link drops, the peer's persistent sessions become orphans: messages for
them are appended to their Redis queues until another node claims them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections import deque
from typing import TYPE_CHECKING

from xmq.cluster import link_frames as frames
from xmq.cluster.direct_hold import Direct, DirectHold
from xmq.cluster.link_frames import BodyReader, Kind
from xmq.cluster.link_tls import LinkTls, TlsLinkServer, log_refused
from xmq.cluster.link_wait import LinkWait, Owner, Waiting
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import (
    NO_LOCAL,
    RETAIN_AS_PUBLISHED,
    DurableSub,
    OrphanIndex,
    OrphanSub,
    RouteTable,
)
from xmq.codec.reason_codes import ReasonCode
from xmq.contract.message_record import decode_record, encode_record
from xmq.core.cluster_ports import DurableStore, NodeIdentity
from xmq.core.message import Message

if TYPE_CHECKING:
    from collections.abc import Callable

    from xmq.core.broker import Broker
    from xmq.core.session import Session, Subscription

log = logging.getLogger("xmq.cluster")

MOVED_KEEP_S = 10.0


def _flags(sub: Subscription) -> int:
    return (NO_LOCAL if sub.no_local else 0) | (
        RETAIN_AS_PUBLISHED if sub.retain_as_published else 0
    )


class ClusterHub:
    """Links to the other nodes and the routes learned over them."""

    def __init__(self, broker: Broker, identity: NodeIdentity, store: DurableStore | None) -> None:
        self.broker = broker
        self.identity = identity
        self.store = store
        self.table = RouteTable()
        self.links: dict[str, PeerLink] = {}
        self._all_links: set[PeerLink] = set()
        self._filters: dict[str, int] = {}
        self._shares: dict[tuple[str, str], int] = {}
        self._requests = itertools.count(1)
        self._takeovers: dict[int, asyncio.Future[bool]] = {}
        self._dialing: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | TlsLinkServer | None = None
        self.link_tls: LinkTls | None = None  # mutual TLS on every link (cluster.link_tls)
        self.forwarded = 0
        self.received = 0
        # Messages for sessions this node owns in Redis: held while the claim attaches them.
        self.direct = DirectHold(broker, self._not_here, 2 * identity.lease_ttl_s + 5.0)
        # Messages for a session's new owner not linked yet (a node that has just started).
        self.link_wait = LinkWait(self._append_for, identity.lease_ttl_s + 5.0)
        # Told the topic of each retained change a peer sends (while retained messages load).
        self.on_retained: Callable[[str], None] | None = None

    # -- links ------------------------------------------------------------------------------

    async def listen(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        if self.link_tls is not None:
            self._server = TlsLinkServer(lambda: PeerLink(self), self.link_tls.server)
            return await self._server.start(host, port)
        self._server = await loop.create_server(
            lambda: PeerLink(self), host=host, port=port, reuse_address=True
        )
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    def connect_peers(self, peers: dict[str, str]) -> None:
        """Dial every live peer (node id -> address) with a larger id that is not linked."""
        me = self.identity.node_id
        if not self.identity.online:
            return
        for node, address in peers.items():
            if node <= me or node in self.links or node in self._dialing:
                continue
            self._dialing.add(node)
            self._spawn(self._dial(node, address))

    async def _dial(self, node: str, address: str) -> None:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        tls = self.link_tls
        try:
            async with asyncio.timeout(2.0):
                await loop.create_connection(
                    lambda: PeerLink(self),
                    host,
                    int(port),
                    ssl=tls.client if tls is not None else None,
                    ssl_handshake_timeout=2.0 if tls is not None else None,
                )
        except ssl.SSLError as error:
            log_refused("to", f"{node} at {address}", error)
        except (OSError, TimeoutError, ValueError) as error:
            log.debug("link to %s at %s failed: %s", node, address, error)
        finally:
            self._dialing.discard(node)

    async def reachable(self, address: str) -> bool:
        """Whether a node link port accepts connections (a killed node's refuses at once)."""
        host, _, port = address.rpartition(":")
        try:
            async with asyncio.timeout(1.0):
                _, writer = await asyncio.open_connection(host, int(port))
        except (OSError, TimeoutError, ValueError):
            return False
        writer.close()
        return True

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def link_hello(self, link: PeerLink, body: bytes) -> None:
        reader = BodyReader(body)
        node, epoch = reader.text(), reader.u64()
        if not self.identity.online or node == self.identity.node_id:
            link.close()
            return
        existing = self.links.get(node)
        if existing is not None and existing is not link:
            if existing.peer_epoch > epoch:
                link.close()
                return
            self._drop_link(existing, orphan=existing.peer_epoch < epoch)
            existing.close()
        link.peer_node = node
        link.peer_epoch = epoch
        self.links[node] = link
        self._all_links.add(link)
        log.info("link up: %s (epoch %d)", node, epoch)
        self._send_snapshot(link)
        for client_id, message, qos in self.link_wait.take((node, epoch)):
            link.send(frames.direct(client_id, self.encode(message, qos, False)))

    def _send_snapshot(self, link: PeerLink) -> None:
        for topic_filter in self._filters:
            link.send(frames.route(True, topic_filter))
        for group, topic_filter in self._shares:
            link.send(frames.share(True, group, topic_filter))
        for session in self.broker.sessions.values():
            if session.store is None:
                continue
            for sub in session.subscriptions.values():
                if sub.share_group is None:
                    link.send(self._dsub(True, session, sub))

    def link_lost(self, link: PeerLink) -> None:
        self._all_links.discard(link)
        if link.peer_node and self.links.get(link.peer_node) is link:
            log.info("link down: %s", link.peer_node)
            self._drop_link(link, orphan=True)

    def _drop_link(self, link: PeerLink, orphan: bool) -> None:
        if self.links.get(link.peer_node) is link:
            del self.links[link.peer_node]
        fresh = self.table.forget_node(
            link.peer_node, link.peer_epoch, orphan and self.store is not None
        )
        unconfirmed, link.unconfirmed = link.unconfirmed, deque()
        if len(fresh):
            # Messages forwarded to the node that it had not confirmed as recorded when the
            # link died: append them for its persistent sessions.
            for _, message in unconfirmed:
                self._to_orphans(fresh, message)
        pending, link.shared_out = link.shared_out, {}
        for group, topic_filter, message in pending.values():
            self._redispatch_shared(group, topic_filter, message, exclude=link.peer_node)

    def _redispatch_shared(
        self, group: str, topic_filter: str, message: Message, exclude: str
    ) -> None:
        """A shared-group message its chosen node did not take: another member gets it."""
        broker = self.broker
        local = broker.shared.get_group(group, topic_filter)
        if local is not None and len(local.members):
            broker.publish_shared_from_peer(group, topic_filter, message)
            return
        remote = self.table.shares.get_group(group, topic_filter)
        if remote is not None and any(node != exclude for node in remote.members):
            self.forward_shared(group, topic_filter, message)
            return
        broker.stats.messages_dropped += 1

    def close_links(self) -> None:
        for link in list(self._all_links):
            link.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.close_links()
        for task in list(self._tasks):
            task.cancel()

    def _broadcast(self, data: bytes) -> None:
        for link in self.links.values():
            link.send(data)

    # -- local subscriptions -> route deltas -------------------------------------------------

    def _dsub(self, added: bool, session: Session, sub: Subscription) -> bytes:
        return frames.durable_sub(
            added, session.client_id, sub.topic_filter, sub.topic_filter, sub.qos, _flags(sub)
        )

    def subscription_changed(self, session: Session, sub: Subscription, added: bool) -> None:
        step = 1 if added else -1
        if sub.share_group is None:
            topic_filter = sub.topic_filter
            count = self._filters.get(topic_filter, 0) + step
            if count <= 0:
                self._filters.pop(topic_filter, None)
                if not added:
                    self._broadcast(frames.route(False, topic_filter))
            else:
                self._filters[topic_filter] = count
                if added and count == 1:
                    self._broadcast(frames.route(True, topic_filter))
            if session.store is not None:
                if added:
                    self.table.orphans.drop(session.client_id)
                    self.table.moved.drop(session.client_id)
                self._broadcast(self._dsub(added, session, sub))
            return
        key = (sub.share_group, sub.topic_filter)
        count = self._shares.get(key, 0) + step
        if count <= 0:
            self._shares.pop(key, None)
            if not added:
                self._broadcast(frames.share(False, *key))
        else:
            self._shares[key] = count
            if added and count == 1:
                self._broadcast(frames.share(True, *key))

    def session_gone(self, session: Session, durable: bool) -> None:
        if durable:
            self._broadcast(frames.durable_gone(session.client_id))

    # -- forwarding ---------------------------------------------------------------------------

    @staticmethod
    def encode(message: Message, qos: int, retain: bool) -> bytes:
        return encode_record(
            "",
            message.topic,
            message.payload,
            message.qos,
            message.retain,
            message.properties,
            message.origin,
            qos,
            retain,
        )

    def forward(self, message: Message) -> int:
        count = 0
        table = self.table
        links = self.links
        if links:
            topic = message.topic
            sent: set[str] = set()
            data = b""
            durable_nodes = table.durable
            for node, _ in table.routes.match(topic):
                if node in sent:
                    continue
                link = links.get(node)
                if link is None:
                    continue
                if not data:
                    data = frames.publish(self.encode(message, message.qos, message.retain))
                link.send_publish(data, message, bool(durable_nodes.get(node)))
                sent.add(node)
            if message.retain and len(sent) < len(links):
                if not data:
                    data = frames.publish(self.encode(message, message.qos, message.retain))
                for node, link in links.items():
                    if node not in sent:
                        link.send_publish(data, message, False)
            count += len(sent)
            if table.shares:
                shared = self.broker.shared
                for group in table.shares.match(topic):
                    if shared.get_group(group.group, group.topic_filter) is None and (
                        self.forward_shared(group.group, group.topic_filter, message)
                    ):
                        count += 1
            self.forwarded += len(sent)
        if len(table.orphans):
            count += self._to_orphans(table.orphans, message)
        if len(table.moved):
            count += self._to_orphans(table.moved, message)
        return count

    def has_shared(self, group: str, topic_filter: str) -> bool:
        found = self.table.shares.get_group(group, topic_filter)
        return found is not None and len(found.members) > 0

    def forward_shared(self, group: str, topic_filter: str, message: Message) -> bool:
        found = self.table.shares.get_group(group, topic_filter)
        if found is None:
            return False
        tried: set[str] = set()
        while True:
            picked = found.pick_excluding(tried)
            if picked is None:
                return False
            node = picked[0]
            link = self.links.get(node)
            if link is not None:
                record = self.encode(message, message.qos, False)
                link.shared_seq = sequence = (link.shared_seq + 1) & 0xFFFFFFFF
                link.shared_out[sequence] = (group, topic_filter, message)
                link.send(frames.shared(sequence, group, topic_filter, record))
                return True
            tried.add(node)

    def _to_orphans(self, index: OrphanIndex, message: Message) -> int:
        store = self.store
        if store is None:
            return 0
        targets: dict[str, tuple[OrphanSub, int, bool]] = {}
        for client_id, orphan in index.tree.match(message.topic):
            if orphan.flags & NO_LOCAL and client_id == message.origin:
                continue
            qos = min(orphan.qos, message.qos)
            retain = message.retain and bool(orphan.flags & RETAIN_AS_PUBLISHED)
            previous = targets.get(client_id)
            if previous is None or previous[1] < qos:
                targets[client_id] = (orphan, qos, retain)
        count = 0
        for client_id, (orphan, qos, retain) in targets.items():
            if qos == 0:
                continue  # QoS 0 is not kept for an offline session
            count += 1

            def moved(node: str, epoch: int, cid: str = client_id, q: int = qos) -> None:
                self._owner_moved(cid, message, q, node, epoch)

            store.append_if_owner(client_id, orphan.owner, message, qos, retain, moved)
        return count

    def _owner_moved(
        self, client_id: str, message: Message, qos: int, node: str, epoch: int
    ) -> None:
        """An orphan append found another owner: send the message to it directly."""
        if not node:
            self.table.orphans.drop(client_id)  # the session ended
            return
        if client_id in self.table.durable.get(node, {}):
            self.table.orphans.drop(client_id)  # its new owner's routes take over
        identity = self.identity
        if node == identity.node_id and epoch == identity.epoch:
            # Claimed here: the claiming CONNECT may not have attached the session yet.
            self.direct.deliver(client_id, (message, qos, False, ()))
            return
        link = self.links.get(node)
        if link is not None and link.peer_epoch == epoch:
            link.send(frames.direct(client_id, self.encode(message, qos, False)))
        elif link is not None and link.peer_epoch > epoch:
            self._append_for((node, epoch), (client_id, message, qos))  # a dead run owns it
        else:
            self.link_wait.add((node, epoch), client_id, message, qos)

    def _append_for(self, owner: Owner, waiting: Waiting) -> None:
        """Append to the session's Redis queue while ``owner`` (a run not linked) owns it."""
        store = self.store
        if store is None:
            return
        client_id, message, qos = waiting

        def moved(node: str, epoch: int) -> None:
            self._owner_moved(client_id, message, qos, node, epoch)

        store.append_if_owner(client_id, owner, message, qos, False, moved)

    def _not_here(self, client_id: str, direct: Direct) -> None:
        """A message for a session owned here that is not attached (its client left during
        the claim, or it was just handed over): into its Redis queue while we still own it."""
        identity = self.identity
        if self.store is None or not identity.online:
            self.broker.stats.drop("session_gone")
            return
        message, qos, _, _ = direct  # a DIRECT message is never sent retained
        self._append_for((identity.node_id, identity.epoch), (client_id, message, qos))

    # -- frames from peers ------------------------------------------------------------------

    def _message(self, record_bytes: bytes) -> tuple[Message, int, bool, tuple[int, ...]]:
        record = decode_record(record_bytes)
        message = Message(
            record.topic,
            record.payload,
            record.qos,
            record.retain,
            record.properties,
            record.origin,
            self.broker.now(),
        )
        return message, record.delivery_qos, record.delivery_retain, record.subscription_ids

    def handle_frame(self, link: PeerLink, kind: int, body: bytes) -> None:
        node = link.peer_node
        table = self.table
        if kind == Kind.PUBLISH:
            self.received += 1
            message = self._message(body)[0]
            if message.retain and (on_retained := self.on_retained) is not None:
                on_retained(message.topic)
            self.broker.publish_from_peer(message)
            link.published_in += 1
            if not link.ack_pending:
                link.ack_pending = True
                self._spawn(self._confirm_publishes(link))
            if len(table.moved):
                self._to_orphans(table.moved, message)
            return
        reader = BodyReader(body)
        if kind == Kind.ROUTE:
            added = bool(reader.u8())
            table.route(node, reader.text(), added)
        elif kind == Kind.SHARE:
            added = bool(reader.u8())
            group = reader.text()
            table.share(node, group, reader.text(), added)
        elif kind == Kind.DSUB:
            added = bool(reader.u8())
            client_id, key, topic_filter = reader.text(), reader.text(), reader.text()
            qos, flags = reader.u8(), reader.u8()
            if added:
                table.moved.drop(client_id)
            table.durable_sub(node, client_id, DurableSub(key, topic_filter, qos, flags), added)
        elif kind == Kind.DGONE:
            table.durable_gone(node, link.peer_epoch, reader.text(), self.store is not None)
        elif kind == Kind.SHARED:
            sequence, group, topic_filter = reader.u32(), reader.text(), reader.text()
            message = self._message(reader.rest())[0]
            self.broker.publish_shared_from_peer(
                group, topic_filter, message, lambda: link.confirm_shared(sequence)
            )
        elif kind == Kind.PUBLISH_ACK:
            link.confirmed(reader.u64())
        elif kind == Kind.SHARED_ACK:
            out = link.shared_out
            for _ in range(reader.u32()):
                out.pop(reader.u32(), None)
        elif kind == Kind.DIRECT:
            client_id = reader.text()
            self.direct.deliver(client_id, self._message(reader.rest()))
        elif kind == Kind.TAKEOVER:
            request, client_id, epoch = reader.u32(), reader.text(), reader.u64()
            self._spawn(self._hand_over(link, request, client_id, epoch))
        elif kind == Kind.TAKEOVER_DONE:
            request, ok = reader.u32(), bool(reader.u8())
            future = self._takeovers.get(request)
            if future is not None and not future.done():
                future.set_result(ok)
        else:
            raise frames.FrameError(f"unknown frame kind {kind}")

    async def _confirm_publishes(self, link: PeerLink) -> None:
        """Tell the sender how many PUBLISH frames are in our records (one ack per flush)."""
        await asyncio.sleep(0)  # let this tick's frames be handled first
        count = link.published_in
        if self.store is not None:
            await self.store.flush()
        link.ack_pending = False
        link.send(frames.publish_ack(count))
        if link.published_in != count and not link.ack_pending:
            link.ack_pending = True
            self._spawn(self._confirm_publishes(link))

    # -- takeover -----------------------------------------------------------------------------

    async def request_takeover(self, owner: tuple[str, int], client_id: str) -> bool:
        link = self.links.get(owner[0])
        if link is None or link.peer_epoch != owner[1]:
            return False
        request = next(self._requests)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._takeovers[request] = future
        link.send(frames.takeover(request, client_id, owner[1]))
        try:
            async with asyncio.timeout(max(2.0, self.identity.lease_ttl_s)):
                return await future
        except TimeoutError:
            return False
        finally:
            self._takeovers.pop(request, None)

    async def _hand_over(self, link: PeerLink, request: int, client_id: str, epoch: int) -> None:
        broker = self.broker
        for _ in range(200):  # a claim of this id in progress here: let it attach first
            if client_id not in broker.claiming:
                break
            await asyncio.sleep(0.005)
        session = broker.sessions.get(client_id)
        if session is not None:
            durable = session.store is not None
            subs = [s for s in session.subscriptions.values() if s.share_group is None]
            broker.hand_over(client_id)
            if durable and self.store is not None and subs:
                owner = (self.identity.node_id, self.identity.epoch)
                for sub in subs:
                    orphan = OrphanSub(owner, sub.qos, _flags(sub))
                    self.table.moved.add(client_id, sub.topic_filter, orphan)
                loop = asyncio.get_running_loop()
                loop.call_later(MOVED_KEEP_S, self.table.moved.drop, client_id)
        if self.store is not None:
            await self.store.flush()
        link.send(frames.takeover_done(request, True))

    # -- offline ----------------------------------------------------------------------------

    def went_offline(self) -> None:
        """The lease is lost: drop the links, disconnect every client, forget the sessions."""
        self.close_links()
        broker = self.broker
        for conn in list(broker.connections):
            conn.close_with(ReasonCode.SERVER_BUSY, "node offline: cluster lease lost")
        broker.drop_all_sessions()

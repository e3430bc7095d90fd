"""The node links: one TCP link per pair of nodes, route sharing, forwarding, takeovers.

Implements ``core.cluster_ports.ClusterRouter``. The node with the smaller id dials (peer
addresses come from the leases); both sides send HELLO, then a snapshot of their routes,
shared groups and persistent subscriptions, then deltas. A publish crosses to each remote node
at most once. When a link drops, the peer's persistent sessions become orphans: messages for
them are appended to their Redis queues until another node claims them.

The parts: ``link_dispatch`` (frames from peers, PUBLISH_ACK confirmations), ``takeover``
(TAKEOVER / TAKEOVER_DONE), ``orphan_appends`` (``APPEND_IF_OWNER`` and a new owner named by
Redis), ``direct_hold`` and ``link_wait`` (messages for a new owner not ready yet).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from xmq.cluster import link_dial, link_dispatch, link_hello, link_ledger, link_loss
from xmq.cluster import link_frames as frames
from xmq.cluster.direct_hold import DirectHold
from xmq.cluster.link_recovery import LinkRecovery
from xmq.cluster.link_tls import LinkTls, TlsLinkServer
from xmq.cluster.link_wait import LinkWait
from xmq.cluster.orphan_appends import OrphanAppends
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import RouteTable, shared_key
from xmq.cluster.takeover import Takeovers, sub_flags
from xmq.codec.reason_codes import ReasonCode
from xmq.contract.message_record import encode_record
from xmq.core.cluster_ports import (
    DurableHold,
    DurableStore,
    NodeIdentity,
    RunIds,
)
from xmq.core.message import Message

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from xmq.core.broker import Broker
    from xmq.core.session import Session, Subscription

log = logging.getLogger("xmq.cluster")


class ClusterHub:
    """Links to the other nodes and the routes learned over them."""

    def __init__(self, broker: Broker, identity: NodeIdentity, store: DurableStore | None) -> None:
        self.broker = broker
        self.identity = identity
        self.store = store
        self.table = RouteTable()
        self.links: dict[str, PeerLink] = {}
        self.resuming_links = 0  # of ``links``, those ``resuming`` (``links_changed``)
        self._all_links: set[PeerLink] = set()
        self._filters: dict[str, int] = {}
        self._shares: dict[tuple[str, str], int] = {}
        # nodes whose link set FEATURE_SHARED_DURABLE: told our persistent sessions' shared
        # subscriptions (DSUB ``$share/<group>/<filter>``)
        self._shared_durable: set[str] = set()
        self.takeovers = Takeovers(self)
        self.dialing: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | TlsLinkServer | None = None
        self.link_tls: LinkTls | None = None  # mutual TLS on every link (cluster.link_tls)
        self.forwarded = 0
        self.received = 0
        self.forward_ids = RunIds(identity, "f")  # "<node id>/<epoch>/f<n>" (``forward_id``)
        # persistent session -> ``forward_ids.last`` when first announced here (DSUB ``since``)
        self._announced_at: dict[str, int] = {}
        # Appends for sessions of dead owners, and what happens when Redis names a new owner.
        self.orphans = OrphanAppends(self)
        # Messages for sessions this node owns in Redis: held while the claim attaches them.
        self.direct = DirectHold(broker, self.orphans.not_here, 2 * identity.lease_ttl_s + 5.0)
        # Messages for a session's new owner not linked yet (a node that has just started).
        self.link_wait = LinkWait(self.orphans.append_for, identity.lease_ttl_s + 5.0)
        # Told each retained change a peer sends: topic, node, forward id (node "": a peer
        # that sends no RETAINED_WRITTEN); each RETAINED_WRITTEN (node, topic, forward id,
        # revision); and each link to a node lost (``store.retained_sync``, wired by the app).
        self.on_retained: Callable[[str, str, str], None] | None = None
        self.on_retained_written: Callable[[str, str, str, int], None] | None = None
        self.on_link_lost: Callable[[str], None] | None = None
        self._written_unsent: dict[str, list[bytes]] = {}  # for links down, to be resumed
        # Whether a run of a node holds its lease (membership's last read; wired by the app).
        # A link to a live run that drops is dialled again and resumed, not orphaned.
        self.peer_alive: Callable[[str, int], bool] = lambda node, epoch: False
        self.addresses: dict[str, str] = {}  # node id -> link address (from the leases)
        # A live run's link given up because its port refused connections (node, epoch,
        # address): the app watches whether it is dead (``cluster.dead_peers``).
        self.peer_refused: Callable[[str, int, str], None] = lambda node, epoch, address: None
        # Dropped links to live runs: dialled again and resumed; heartbeats.
        self.recovery = LinkRecovery(self)

    # -- links ------------------------------------------------------------------------------

    async def listen(self, host: str, port: int) -> int:
        """Accept node links on ``host:port`` (0: any); the port bound (``link_dial``)."""
        self._server, bound = await link_dial.listen(self, host, port)
        return bound

    def connect_peers(self, peers: dict[str, str]) -> None:
        """Dial every live peer (node id -> address) with a larger id that is not linked."""
        me = self.identity.node_id
        self.addresses.update(peers)
        if not self.identity.online:
            return
        self.recovery.start()
        for node, address in peers.items():
            if node <= me or node in self.links or node in self.dialing:
                continue
            self.dialing.add(node)
            self.spawn(self.dial(node, address))

    async def dial(self, node: str, address: str) -> None:
        await link_dial.dial(self, node, address)

    async def reachable(self, address: str) -> bool:
        return await link_dial.reachable(address)

    async def refuses(self, address: str) -> bool:
        return await link_dial.refuses(address)

    def spawn(self, coro: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def link_hello(self, link: PeerLink, body: bytes) -> None:
        link_hello.hello(self, link, body)

    def link_up(self, node: str, link: PeerLink) -> None:
        """``link`` is the link to ``node`` (its HELLO handled)."""
        self.links[node] = link
        self._all_links.add(link)
        self.links_changed()

    def links_changed(self) -> None:
        """A link joined or left ``links``, or one there started or stopped ``resuming``
        (``PeerLink.resuming``): how many there resume, counted again (``may_hold`` reads
        it per QoS 1 publish; links change rarely)."""
        count = 0
        for link in self.links.values():
            if link.resuming:
                count += 1
        self.resuming_links = count

    def reads_shared_durable(self, node: str, reads: bool) -> None:
        """Whether ``node``'s link set FEATURE_SHARED_DURABLE (its HELLO)."""
        if reads:
            self._shared_durable.add(node)
        else:
            self._shared_durable.discard(node)

    def send_snapshot(self, link: PeerLink) -> None:
        for topic_filter in self._filters:
            link.send(frames.route(True, topic_filter))
        for group, topic_filter in self._shares:
            link.send(frames.share(True, group, topic_filter))
        shared = link.peer_node in self._shared_durable
        for session in self.broker.sessions.values():
            if session.store is None:
                continue
            for sub in session.subscriptions.values():
                if sub.share_group is None or shared:
                    link.send(self._dsub(True, session, sub))

    def link_lost(self, link: PeerLink) -> None:
        self._all_links.discard(link)
        node = link.peer_node
        if not node or self.links.get(node) is not link:
            return
        if (lost := self.on_link_lost) is not None:
            lost(node)  # (resumed or not: what it did not announce yet is lost with it)
        if self.recovery.suspend(link):
            return
        log.info("link down: %s", node)
        self.drop_link(link, orphan=True)

    def drop_link(self, link: PeerLink, orphan: bool) -> None:
        link_loss.drop_link(self, link, orphan)

    def settle_shared(self, link: PeerLink, shared_holds: dict[int, DurableHold]) -> None:
        link_loss.settle_shared(self, link, shared_holds)

    def forget_unsent(self, node: str) -> None:
        """The RETAINED_WRITTEN frames kept for a link to ``node`` that is down: dropped."""
        self._written_unsent.pop(node, None)

    def close_links(self) -> None:
        for link in list(self._all_links):
            link.close()

    async def stop(self) -> None:
        self.recovery.stop()
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
        """A DSUB of ``session``'s subscription, with the forward number when the session was
        first announced here: the receivers compare it with our PUBLISH frames' ids — one
        numbered lower was routed before the session was here, even when it arrives after
        this DSUB (sent again after a re-link, behind the route snapshot): a node the session
        moved away from hands that one on (``OrphanAppends``)."""
        client_id = session.client_id
        since = self._announced_at.setdefault(client_id, self.forward_ids.last)
        group = sub.share_group
        key = sub.topic_filter if group is None else shared_key(group, sub.topic_filter)
        return frames.durable_sub(
            added, client_id, key, sub.topic_filter, sub.qos, sub_flags(sub), since
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
                    self.table.owned_live(session.client_id)
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
        if session.store is not None:  # a persistent member: to the peers that read it
            if added:
                self.table.owned_live(session.client_id)
            data = self._dsub(added, session, sub)
            for node in self._shared_durable:
                link = self.links.get(node)
                if link is not None:
                    link.send(data)

    def session_gone(self, session: Session, durable: bool) -> None:
        self._announced_at.pop(session.client_id, None)
        if durable:
            self._broadcast(frames.durable_gone(session.client_id))

    # -- forwarding ---------------------------------------------------------------------------

    def forward_id(self, message: Message) -> str:
        """The message's cluster-wide ``forward_id`` (``<node>/<epoch>/f<n>``), given here the
        first time the message leaves this node: the receiver's records and every later append
        of it use the same id, so a replayed copy finds the receiver's ``session:seen``
        marker."""
        forward_id = message.forward_id
        if not forward_id:
            forward_id = self.forward_ids.next()
            message.forward_id = forward_id  # given once: see Message.forward_id
        return forward_id

    def forward_raw(self, message: Message) -> bytes:
        """``forward_id(message)`` as UTF-8, for the frame: a new id is made as bytes
        (``RunIds.next_raw``: the same number, no ``str`` to encode) and given to the message
        as that (``Message.give_forward_raw``; its ``str`` made only if read)."""
        raw = message.forward_raw
        if not raw:
            raw = self.forward_ids.next_raw()
            message.give_forward_raw(raw)  # given once: see Message.forward_id
        return raw

    def encode(self, message: Message, qos: int, retain: bool) -> bytes:
        """The record of a message crossing a link, under its ``forward_id``."""
        return encode_record(
            self.forward_id(message),
            message.topic,
            message.payload,
            message.qos,
            message.retain,
            message.properties,
            message.origin,
            qos,
            retain,
        )

    def publish_frame(self, message: Message, kept: bool) -> bytes:
        """The PUBLISH (``kept``, else PUBLISH_UNKEPT) frame of ``frames.publish(encode(
        message, message.qos, message.retain))``, built in one piece (``publish_record``)."""
        return frames.publish_record(
            kept,
            self.forward_raw(message),
            message.topic,
            message.payload,
            message.qos,
            message.retain,
            message.properties,
            message.origin,
            message.qos,
            message.retain,
        )

    def forward(self, message: Message, hold: DurableHold | None = None) -> int:
        count = 0
        table = self.table
        links = self.links
        sent: list[str] = []  # nodes the message went to (a few: cheaper than a set)
        if links:
            topic = message.topic
            data = b""  # the PUBLISH frame, made once (its kind set per link: ``with_kind``)
            durable_nodes = table.durable
            for node, _ in table.routes.match(topic):
                if node in sent:
                    continue
                link = links.get(node)
                if link is None:
                    continue
                keep = bool(durable_nodes.get(node))
                wants_ack = link.wants_ack(keep)
                if not data:
                    data = self.publish_frame(message, wants_ack)
                else:
                    data = frames.with_kind(data, wants_ack)
                link.send_publish(data, message, keep, hold)
                sent.append(node)
            if message.retain and len(sent) < len(links):
                for node, link in links.items():
                    if node not in sent:
                        wants_ack = link.wants_ack(False)
                        if not data:
                            data = self.publish_frame(message, wants_ack)
                        else:
                            data = frames.with_kind(data, wants_ack)
                        link.send_publish(data, message, False)
            count += len(sent)
            if table.shares:
                shared = self.broker.shared
                for group in table.shares.match(topic):
                    if shared.get_group(group.group, group.topic_filter) is None and (
                        self.forward_shared(group.group, group.topic_filter, message, hold)
                    ):
                        count += 1
            self.forwarded += len(sent)
        if len(table.orphans):
            count += self.orphans.to_orphans(table.orphans, message, hold)
        if len(table.shared_orphans):  # groups without a live member anywhere
            count += self.orphans.to_shared_orphans(message, hold)
        if len(table.moved):  # not for a session a node it was sent to announced: it is there
            count += self.orphans.to_orphans(table.moved, message, hold, sent)
        if table.pending:  # sessions of live runs not linked yet: to them once linked
            count += self.orphans.to_unlinked(message, hold, sent)
        return count

    def may_hold(self) -> bool:
        """Whether ``forward`` may take a hold now (of a message not retained): a node with
        persistent sessions (its PUBLISH frames are kept), a link resuming (every frame is
        kept), a shared group with members elsewhere (SHARED frames), a session of a dead,
        moved or not yet linked owner (appends, DIRECT frames). Else nothing it sends is kept
        and it takes none, whatever the message."""
        table = self.table
        if table.pending or len(table.orphans) or len(table.moved) or len(table.shared_orphans):
            return True
        if table.shares:
            return True
        if table.durable:  # (no iterator to make for none)
            for sessions in table.durable.values():
                if sessions:
                    return True
        return self.resuming_links > 0  # (kept by ``links_changed``: no walk per message)

    def retained_written(self, topic: str, forward_id: str, revision: int) -> None:
        """A retained change forwarded from here is written to Redis (``revision``; 0: not
        stored): RETAINED_WRITTEN to the peers that read it (after its PUBLISH: one link)."""
        data = b""
        for node, link in self.links.items():
            if link.retained_written:
                if not data:
                    data = frames.retained_written(topic, forward_id, revision)
                if link.closed:  # dropped, to be resumed: after the frames it sends again
                    self._written_unsent.setdefault(node, []).append(data)
                else:
                    link.send(data)

    def resumed(self, link: PeerLink) -> None:
        """The peer's RESUME is handled (the frames it had not handled sent again): the
        RETAINED_WRITTEN frames kept while the link was down follow them."""
        for data in self._written_unsent.pop(link.peer_node, ()):
            link.send(data)

    def has_shared(self, group: str, topic_filter: str) -> bool:
        found = self.table.shares.get_group(group, topic_filter)
        return found is not None and len(found.members) > 0

    def forward_shared(
        self, group: str, topic_filter: str, message: Message, hold: DurableHold | None = None
    ) -> bool:
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
            if link is not None and not link.closed:
                record = self.encode(message, message.qos, False)
                link.shared_seq = sequence = (link.shared_seq + 1) & 0xFFFFFFFF
                link.shared_out[sequence] = (group, topic_filter, message)
                data = frames.shared(sequence, group, topic_filter, record)
                link_ledger.send_shared(link, data, sequence, message, hold)
                return True
            tried.add(node)

    # -- frames from peers, takeovers ---------------------------------------------------------

    def handle_frame(self, link: PeerLink, kind: int, body: bytes) -> None:
        link_dispatch.handle_frame(self, link, kind, body)

    async def request_takeover(
        self, owner: tuple[str, int], client_id: str, ends_session: bool = False
    ) -> bool:
        return await self.takeovers.request(owner, client_id, ends_session)

    # -- offline ----------------------------------------------------------------------------

    def went_offline(self) -> None:
        """The lease is lost: drop the links, disconnect every client, forget the sessions."""
        self.close_links()
        broker = self.broker
        for conn in list(broker.connections):
            conn.close_with(ReasonCode.SERVER_BUSY, "node offline: cluster lease lost")
        broker.drop_all_sessions()

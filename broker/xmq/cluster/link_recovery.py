"""Dropped links to live nodes: dialled again and resumed, not orphaned; link heartbeats.

A link that drops while this node is online and the peer run's lease was present at the last
membership read (both ends with HELLO feature bit 2) is *suspended*: the hub keeps the peer's
routes and every PUBLISH / DIRECT frame it had not seen confirmed or sends meanwhile
(``PeerLink.resuming``); shared-group messages go to other members. The node with the smaller
id dials again. The new link inherits the old one's counts; each side's RESUME says how many
counted frames of the other's run it handled, and the kept frames after that are sent again in
order. The peer's route snapshot, sent again on the new link, replaces what this node held for
it (``RouteTable.reconcile`` at its SNAPSHOT_END). The peer is given up (treated as dead: its
sessions become orphans) when its lease goes, its link port refuses connections, this node goes
offline, or after the lease TTL + 2 s.

Heartbeats (HELLO feature bit 4): PING every second on each link; a link on which nothing
arrived for ``HEARTBEAT_TIMEOUT_S`` is aborted (then suspended like any dropped link), so a
half-open link is noticed in seconds, not when TCP gives up.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from xmq.cluster import link_frames as frames
from xmq.cluster import link_ledger

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.link_ledger import Unconfirmed
    from xmq.cluster.peer_link import PeerLink
    from xmq.core.cluster_ports import DurableHold

log = logging.getLogger("xmq.cluster")

REFUSED = "its link port refuses connections"

HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_TIMEOUT_S = 5.0
"""A link (both ends with FEATURE_HEARTBEAT) on which nothing arrived for this long is closed."""


class LinkRecovery:
    """The hub's dropped links to live runs, and the heartbeat of every link."""

    __slots__ = ("_heartbeat", "given_up", "heartbeat_timeouts", "hub", "resumed", "stale_routes")

    def __init__(self, hub: ClusterHub) -> None:
        self.hub = hub
        self.resumed = 0
        self.given_up = 0
        self.heartbeat_timeouts = 0
        self.stale_routes = 0  # routes a resumed link's snapshot no longer named: dropped
        self._heartbeat: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._beat(), name="link-heartbeat"
            )

    def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()

    def suspend(self, link: PeerLink) -> bool:
        """The link dropped: suspend it when its peer run is alive (``False``: it is dead)."""
        hub = self.hub
        node = link.peer_node
        if not (link.resumable and hub.identity.online and hub.peer_alive(node, link.peer_epoch)):
            return False
        # Both nodes hold their leases: a dropped connection, not a dead node. Nothing is
        # orphaned; the link is dialled again and resumed (frames for the node are kept).
        log.warning(
            "link to %s (epoch %d) lost, its lease is live: re-linking", node, link.peer_epoch
        )
        link.resuming = True
        self.settle(link)
        hub.spawn(self._relink(link))
        return True

    async def _relink(self, link: PeerLink) -> None:
        """Dial a dropped link to a live run again (the node with the smaller id dials), until
        a new link replaces it; give up — the run is dead: orphan — when its lease goes, its
        link port refuses connections, or after the lease TTL + 2 s."""
        loop = asyncio.get_running_loop()
        node, epoch = link.peer_node, link.peer_epoch
        deadline = loop.time() + self.hub.identity.lease_ttl_s + 2.0
        why = ""
        while self.hub.links.get(node) is link:
            address = self.hub.addresses.get(node, "")
            if not self.hub.identity.online:
                why = "this node is offline"
            elif not self.hub.peer_alive(node, epoch):
                why = "its lease is gone"
            elif loop.time() > deadline:
                why = f"not re-linked within {self.hub.identity.lease_ttl_s + 2.0:.1f}s"
            elif not address or await self.hub.refuses(address):
                why = REFUSED
            elif self.hub.identity.node_id < node and node not in self.hub.dialing:
                self.hub.dialing.add(node)
                await self.hub.dial(node, address)  # connected (or not); its HELLO follows
            if why:
                break
            await asyncio.sleep(0.2)
        if why and self.hub.links.get(node) is link:
            self.given_up += 1
            log.warning("link to %s (epoch %d) given up: %s", node, epoch, why)
            self.hub.drop_link(link, orphan=True)
            if why == REFUSED:  # killed? its lease may be released before its TTL
                self.hub.peer_refused(node, epoch, self.hub.addresses.get(node, ""))

    def settle(self, link: PeerLink) -> None:
        """A link that dropped (or was replaced) while its node lives: its shared-group
        messages go to other members now (as when a node dies); PUBLISH and DIRECT frames
        stay kept for the next link to that run."""
        shared_holds: dict[int, DurableHold] = {}
        kept: deque[Unconfirmed] = deque()
        for entry in link.take_unconfirmed():
            what = entry[3]
            if isinstance(what, int):
                if entry[2] is not None:
                    shared_holds[what] = entry[2]
            else:
                kept.append(entry)
        link.unconfirmed = kept
        self.hub.settle_shared(link, shared_holds)

    def resume(self, link: PeerLink, handled: int) -> None:
        """The peer's RESUME: send again, in order, what it has not handled."""
        if not link.resuming:
            return
        again = link_ledger.resend_from(link, handled, lambda entry: self._frame_again(link, entry))
        if again:
            log.warning("link to %s: %d frames sent again after a re-link", link.peer_node, again)

    def reconciled(self, link: PeerLink, dropped: int) -> None:
        """The peer's snapshot on a resumed link is complete; ``dropped`` of its routes,
        shared groups and persistent subscriptions held here were not in it (removed while
        the link was down) and are gone now."""
        self.stale_routes += dropped
        if dropped:
            log.warning(
                "link to %s: %d routes removed while it was down dropped after the re-link",
                link.peer_node,
                dropped,
            )

    def _frame_again(self, link: PeerLink, entry: Unconfirmed) -> bytes | None:
        _, message, _, what = entry
        if what is None:
            return frames.publish(self.hub.encode(message, message.qos, message.retain))
        if isinstance(what, int):
            shared = link.shared_out.get(what)
            if shared is None:
                return None
            group, topic_filter, _ = shared
            return frames.shared(
                what, group, topic_filter, self.hub.encode(message, message.qos, False)
            )
        client_id, qos = what
        return frames.direct(client_id, self.hub.encode(message, qos, False))

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            self.heartbeat_tick(loop.time())

    def heartbeat_tick(self, now: float) -> None:
        """PING every link (once a second); abort one not heard for the heartbeat timeout —
        unless this node itself cannot prove its lease (it was paused: the silence was ours)
        or is not reading the link, behind a fan-out from it (``PeerLink.fan_in``)."""
        for link in list(self.hub.links.values()):
            if not link.heartbeat or link.closed:
                continue
            silent = now - link.last_heard
            if (
                silent > HEARTBEAT_TIMEOUT_S
                and now < self.hub.broker.fence.deadline
                and not link.waiting_on_fanout
            ):
                self.heartbeat_timeouts += 1
                log.warning(
                    "link to %s: nothing heard for %.1fs (heartbeat): closing it",
                    link.peer_node,
                    silent,
                )
                link.abort()
            else:
                link.send(frames.PING_FRAME)

"""Live takeovers over the node links (TAKEOVER / TAKEOVER_DONE).

A node whose claim found a live owner asks it to close the client (0x8E) and hand the session
over; the owner forgets the session, flushes its pending records and answers. The old owner
keeps the moved session's filters for ``MOVED_KEEP_S`` for messages already on their way to
it (appended to the session's Redis queue, or sent to the new owner), also after the new
owner's DSUB — but not for messages from or to a node that has announced the session, which
delivers them itself (``OrphanAppends.to_orphans``).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

from xmq.cluster import link_frames as frames
from xmq.cluster.route_table import NO_LOCAL, RETAIN_AS_PUBLISHED, OrphanSub

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.peer_link import PeerLink
    from xmq.core.session import Subscription

MOVED_KEEP_S = 10.0


def sub_flags(sub: Subscription) -> int:
    """The DSUB / orphan flags of a subscription."""
    return (NO_LOCAL if sub.no_local else 0) | (
        RETAIN_AS_PUBLISHED if sub.retain_as_published else 0
    )


class Takeovers:
    """Takeover requests this node sent (awaiting TAKEOVER_DONE) and the ones it answers."""

    __slots__ = ("_futures", "_requests", "counts", "hub")

    def __init__(self, hub: ClusterHub) -> None:
        self.hub = hub
        # requested / handed_over / timed_out / revoked_claims (metrics)
        self.counts = {"requested": 0, "handed_over": 0, "timed_out": 0, "revoked_claims": 0}
        self._requests = itertools.count(1)
        self._futures: dict[int, asyncio.Future[bool]] = {}

    async def request(
        self, owner: tuple[str, int], client_id: str, ends_session: bool = False
    ) -> bool:
        hub = self.hub
        link = hub.links.get(owner[0])
        if link is None or link.closed or link.peer_epoch != owner[1]:
            return False  # not linked (a dropped link being dialled again: asked next round)
        request = next(self._requests)
        self.counts["requested"] += 1
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._futures[request] = future
        link.send(frames.takeover(request, client_id, owner[1], ends_session))
        try:
            async with asyncio.timeout(max(1.0, min(hub.identity.lease_ttl_s, 3.0))):
                return await future
        except TimeoutError:
            self.counts["timed_out"] += 1
            return False
        finally:
            self._futures.pop(request, None)

    def done(self, request: int, ok: bool) -> None:
        """TAKEOVER_DONE arrived."""
        future = self._futures.get(request)
        if future is not None and not future.done():
            future.set_result(ok)

    async def hand_over(
        self, link: PeerLink, request: int, client_id: str, ends_session: bool = False
    ) -> None:
        """TAKEOVER arrived: close the client, forget the session, flush, answer.
        ``ends_session``: the new connection starts clean (its pending delayed will goes)."""
        hub = self.hub
        broker = hub.broker
        store = hub.store
        for _ in range(200):  # a claim of this id in progress here: let it attach first
            if client_id not in broker.claiming:
                break
            await asyncio.sleep(0.005)
        if client_id in broker.claiming:
            # Still in flight: its reply predates this takeover and must not be applied.
            broker.revoked_claims.add(client_id)
            self.counts["revoked_claims"] += 1
        session = broker.sessions.get(client_id)
        self.counts["handed_over"] += 1
        if session is not None:
            durable = session.store is not None
            subs = [s for s in session.subscriptions.values() if s.share_group is None]
            broker.hand_over(client_id, ends_session)
            if durable and store is not None and subs:
                owner = (hub.identity.node_id, hub.identity.epoch)
                moved = hub.table.moved
                for sub in subs:
                    orphan = OrphanSub(owner, sub.qos, sub_flags(sub))
                    moved.add(client_id, sub.topic_filter, orphan)
                loop = asyncio.get_running_loop()
                loop.call_later(MOVED_KEEP_S, moved.drop, client_id)
        if store is not None:
            await store.flush()
        link.send(frames.takeover_done(request, True))

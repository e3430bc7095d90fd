"""Messages for persistent sessions whose owner is gone, or that moved away from here.

A message matching an orphan's subscription is appended to the session's Redis queue with
``APPEND_IF_OWNER`` (expecting the dead owner's run). When Redis refuses because another node
owns the session by then, the message goes to that owner: held here while this node's own claim
attaches it (``DirectHold``), over the link with DIRECT, after the link's HELLO when the owner
is not linked yet (``LinkWait``), or appended expecting the owner's run when that run is dead.

Each step carries the publisher's held acknowledgement (``DurableHold``, when there is one):
the append holds it until Redis answers, a DIRECT frame until the owner confirms it in its
records, so the ack goes out only once the message is durable somewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import TYPE_CHECKING

from xmq.cluster import link_frames as frames
from xmq.cluster import link_ledger
from xmq.cluster.link_wait import Owner, Waiting
from xmq.cluster.route_table import (
    NO_LOCAL,
    RETAIN_AS_PUBLISHED,
    OrphanIndex,
    OrphanSub,
)

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.direct_hold import Direct
    from xmq.core.cluster_ports import DurableHold
    from xmq.core.message import Message
    from xmq.routing.shared_tree import SharedGroup


def _announced(
    hub: ClusterHub,
    nodes: Collection[str],
    client_id: str,
    forward_id: str,
) -> bool:
    """One of ``nodes`` has announced subscriptions of ``client_id``'s persistent session
    (an empty entry: they were all withdrawn since) and routed the message with them: not a
    message of its own (``forward_id`` ``<node>/<epoch>/f<n>``) numbered at most the
    announcement's ``since`` — one it routed before the session was there, whose frame can
    arrive after the announcement when the link was re-established in between (frames sent
    again come behind the new link's route snapshot)."""
    durable = hub.table.durable
    for node in nodes:
        subs = durable.get(node, {}).get(client_id)
        if not subs:
            continue
        since = next(iter(subs.values())).since
        link = hub.links.get(node)
        own = "" if link is None else f"{node}/{link.peer_epoch}/f"
        if since < 0 or not own or not forward_id.startswith(own):
            return True  # an older node, or not its message: the link's order holds
        number = forward_id[len(own) :]
        if not number.isdigit() or int(number) > since:
            return True
    return False


class OrphanAppends:
    """The hub's appends for sessions without a live, linked owner."""

    __slots__ = ("appends", "hub", "retry_s", "retries", "unlinked")

    def __init__(self, hub: ClusterHub) -> None:
        self.hub = hub
        self.appends = 0  # APPEND_IF_OWNER calls (a metric)
        self.retries = 0  # appends asked again: the owner run still held its lease
        self.unlinked = 0  # messages for a live owner run not linked yet (``to_unlinked``)
        self.retry_s = max(0.1, min(0.5, hub.identity.lease_ttl_s / 5))

    def to_orphans(
        self,
        index: OrphanIndex,
        message: Message,
        hold: DurableHold | None = None,
        routed_by: Collection[str] = (),
    ) -> int:
        """Append ``message`` for every session of ``index`` it matches; return how many.

        ``routed_by``: the other nodes that route ``message`` to their own local subscribers
        (the node it came from; the nodes this node sent it to). A session one of them has
        announced (DSUB, and no DGONE since) is skipped: frames of a link arrive in the order
        they were sent, so that node has the session subscribed when it routes the message,
        and delivers it itself. Handing it on as well (a moved session, ``table.moved``) would
        give the session a second copy under another record id: a QoS 2 duplicate. A message
        of that node's own numbered at most its DSUB's ``since`` was routed there before the
        session was: handed on (it came behind the DSUB after a re-link; ``_announced``)."""
        store = self.hub.store
        if store is None:
            return 0
        targets = self._targets(index, message, routed_by)
        count = 0
        for client_id, (orphan, qos, retain) in targets.items():
            if qos == 0:
                continue  # QoS 0 is not kept for an offline session
            count += 1
            self._append(client_id, orphan.owner, message, qos, retain, hold)
        return count

    def to_shared_orphans(self, message: Message, hold: DurableHold | None) -> int:
        """``message`` for each matching group that has no member here nor on a linked
        node, only persistent members whose owner is gone: appended to one of their queues
        (a single node queues it for an offline persistent member:
        ``shared_delivery.deliver_shared``).
        Before, it was routed nowhere (0x10) and lost (issue 12)."""
        count = 0
        hub = self.hub
        local = hub.broker.shared
        for group in hub.table.shared_orphans.groups.match(message.topic):
            name, topic_filter = group.group, group.topic_filter
            if local.get_group(name, topic_filter) is not None or hub.has_shared(
                name, topic_filter
            ):
                continue
            if self.to_shared_orphan(group, message, hold):
                count += 1
        return count

    def to_shared_orphan(
        self, group: SharedGroup[str, OrphanSub], message: Message, hold: DurableHold | None
    ) -> bool:
        """Append ``message`` to the queue of one orphaned persistent member of ``group``
        (the next in round-robin order, one that subscribed with QoS 1 or 2): the group has
        no live member anywhere. False when there is none, or the message is QoS 0 (not kept
        for an offline session). Its held ack waits for the append, as for ``to_orphans``; a
        member Redis says another node owns by now gets it from that node (``owner_moved``).

        A message with an inbound QoS 2 id is appended under that id: the member's
        ``session:seen`` marker (not the group's ``shared:seen`` claim) keeps a copy routed
        again to the same member out of its queue."""
        store = self.hub.store
        if store is None or message.qos == 0:
            return False
        tried: set[str] = set()
        while (picked := group.pick_excluding(tried)) is not None:
            client_id, orphan = picked
            tried.add(client_id)
            qos = min(orphan.qos, message.qos)  # (no No Local on a shared subscription)
            if qos == 0:
                continue
            self._append(client_id, orphan.owner, message, qos, False, hold)
            return True
        return False

    def _append(
        self,
        client_id: str,
        owner: Owner,
        message: Message,
        qos: int,
        retain: bool,
        hold: DurableHold | None,
    ) -> None:
        """``APPEND_IF_OWNER`` expecting ``owner``; a newer owner Redis names gets it
        (``_answered``)."""
        store = self.hub.store
        assert store is not None

        def moved(node: str, epoch: int) -> None:
            self._answered(owner, (client_id, message, qos, hold), node, epoch)

        self.appends += 1
        store.append_if_owner(client_id, owner, message, qos, retain, moved, hold)

    def to_unlinked(self, message: Message, hold: DurableHold | None, sent: Collection[str]) -> int:
        """Send ``message`` to every session it matches of an owner run that was alive when
        this node read the session from Redis (``table.pending``: at start or on rejoining)
        and that no live node has announced since; return how many. Not linked yet, it waits
        for that run's link (``LinkWait``, the publisher's ack held) and goes to it with
        DIRECT; before, it was routed nowhere (0x10) though the session and its client were
        live (issue 12). A session a node in ``sent`` announced is left to that node's own
        routing; a linked owner that has not announced it (its claim attaching it, or its
        client gone during the claim) gets it with DIRECT (held there during the claim, else
        queued in Redis for the next one). Such a session stays pending while Redis says that
        run owns it (``PendingOwners``); before, the link ended the wait: 0x10 again."""
        hub = self.hub
        if hub.store is None:
            return 0
        count = 0
        for (node, epoch), pending in list(hub.table.pending.items()):
            for client_id, (_, qos, _) in self._targets(pending.index, message, sent).items():
                if qos:
                    count += 1
                    self.unlinked += 1
                    self.owner_moved(client_id, message, qos, node, epoch, hold)
        return count

    def _targets(
        self, index: OrphanIndex, message: Message, routed_by: Collection[str]
    ) -> dict[str, tuple[OrphanSub, int, bool]]:
        """client id -> (its best matching entry, delivery QoS, retain) for ``message``."""
        hub = self.hub
        targets: dict[str, tuple[OrphanSub, int, bool]] = {}
        for client_id, orphan in index.tree.match(message.topic):
            if orphan.flags & NO_LOCAL and client_id == message.origin:
                continue
            if routed_by and _announced(hub, routed_by, client_id, message.forward_id):
                continue
            qos = min(orphan.qos, message.qos)
            retain = message.retain and bool(orphan.flags & RETAIN_AS_PUBLISHED)
            previous = targets.get(client_id)
            if previous is None or previous[1] < qos:
                targets[client_id] = (orphan, qos, retain)
        return targets

    def owner_moved(
        self,
        client_id: str,
        message: Message,
        qos: int,
        node: str,
        epoch: int,
        hold: DurableHold | None = None,
    ) -> None:
        """An orphan append found another owner: send the message to it directly."""
        hub = self.hub
        table = hub.table
        if not node:
            table.orphans.drop(client_id)  # the session ended
            return
        if client_id in table.durable.get(node, {}):
            table.orphans.drop(client_id)  # its new owner's routes take over
        identity = hub.identity
        if node == identity.node_id and epoch == identity.epoch:
            # Claimed here: the claiming CONNECT may not have attached the session yet.
            hub.direct.deliver(client_id, (message, qos, False, ()), hold)
            return
        link = hub.links.get(node)
        if link is not None and link.peer_epoch == epoch:
            data = frames.direct(client_id, hub.encode(message, qos, False))
            link_ledger.send_direct(link, data, client_id, message, qos, hold)
        elif link is not None and link.peer_epoch > epoch:
            self.append_for((node, epoch), (client_id, message, qos, hold))  # a dead run owns it
        else:
            hub.link_wait.add((node, epoch), client_id, message, qos, hold)

    def append_for(self, owner: Owner, waiting: Waiting) -> None:
        """Append to the session's Redis queue while ``owner`` (a run not linked) owns it."""
        store = self.hub.store
        if store is None:
            return
        client_id, message, qos, hold = waiting

        def moved(node: str, epoch: int) -> None:
            self._answered(owner, waiting, node, epoch)

        self.appends += 1
        store.append_if_owner(client_id, owner, message, qos, False, moved, hold)

    def _answered(self, expected: Owner, waiting: Waiting, node: str, epoch: int) -> None:
        """Redis refused an append expecting ``expected``: the session is ``node``'s run's.

        When that is the expected run itself, the run still holds its lease: it is alive and
        its session is never appended to (``APPEND_IF_OWNER``'s fencing). Linked: DIRECT to it.
        Not linked (its link dropped and is being dialled again, or it was killed and its lease
        has not expired yet): asked again every ``retry_s`` until it is linked or its lease is
        gone, the publisher's held ack held meanwhile."""
        client_id, message, qos, hold = waiting
        hub = self.hub
        if (node, epoch) == expected and node != hub.identity.node_id:
            link = hub.links.get(node)
            if link is None or link.peer_epoch != epoch:
                if hold is not None:
                    hold.hold()  # the store releases its own hold when this returns
                self.retries += 1
                loop = asyncio.get_running_loop()
                loop.call_later(self.retry_s, self._again, expected, waiting)
                return
        self.owner_moved(client_id, message, qos, node, epoch, hold)

    def _again(self, owner: Owner, waiting: Waiting) -> None:
        hold = waiting[3]
        try:
            if self.hub.identity.online:
                self.append_for(owner, waiting)
        finally:
            if hold is not None:
                hold.release()

    def not_here(self, client_id: str, direct: Direct, hold: DurableHold | None) -> None:
        """A message for a session owned here that is not attached (its client left during
        the claim, or it was just handed over): into its Redis queue while we still own it."""
        hub = self.hub
        identity = hub.identity
        if hub.store is None or not identity.online:
            hub.broker.stats.drop("session_gone")
            return
        message, qos, _, _ = direct  # a DIRECT message is never sent retained
        self.append_for((identity.node_id, identity.epoch), (client_id, message, qos, hold))

"""A node link lost for good: its routes forgotten, what it carried handed on.

Frames the peer had not confirmed as recorded when the link died are appended for its
persistent sessions (``orphan_appends``: a DIRECT one for its session, expecting the dead
run); the publishers' held acks wait for those appends instead. Shared-group messages it had
not acknowledged go to another member (keeping their inbound id, so a group is not given one
twice: ``core.shared_claims``). A link dropped to a live run is not lost: it is dialled again
and resumed (``link_recovery``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.core.cluster_ports import NO_DURABLE_CONTEXT, DurableContext

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.peer_link import PeerLink
    from xmq.core.cluster_ports import DurableHold
    from xmq.core.message import Message


def drop_link(hub: ClusterHub, link: PeerLink, orphan: bool) -> None:
    """The link is gone for good (``orphan``: its run is dead, its persistent sessions are
    orphans): its routes forgotten, what the peer never confirmed handed on."""
    if hub.links.get(link.peer_node) is link:
        del hub.links[link.peer_node]
        hub.links_changed()
    hub.forget_unsent(link.peer_node)
    if (lost := hub.on_link_lost) is not None:
        lost(link.peer_node)
    fresh = hub.table.forget_node(
        link.peer_node, link.peer_epoch, orphan and hub.store is not None, hub.broker.sessions
    )
    # Messages sent to the node that it had not confirmed as recorded when the link died:
    # appended for its persistent sessions (a DIRECT one for its session, expecting the
    # dead run); the publishers' held acks wait for those appends instead.
    dead = (link.peer_node, link.peer_epoch)
    # unconfirmed SHARED ones: their held acks wait for the member re-dispatched to
    shared_holds: dict[int, DurableHold] = {}
    for _, message, hold, what in link.take_unconfirmed():
        if what is None:
            if len(fresh):
                hub.orphans.to_orphans(fresh, message, hold)
        elif isinstance(what, int):
            if hold is not None:
                shared_holds[what] = hold
            continue
        elif orphan:
            client_id, qos = what
            hub.orphans.append_for(dead, (client_id, message, qos, hold))
        if hold is not None:
            hold.release()
    settle_shared(hub, link, shared_holds)


def settle_shared(hub: ClusterHub, link: PeerLink, shared_holds: dict[int, DurableHold]) -> None:
    """The shared-group messages sent over the link and not acknowledged: re-dispatched."""
    pending, link.shared_out = link.shared_out, {}
    for sequence, (group, topic_filter, message) in pending.items():
        hold = shared_holds.pop(sequence, None)
        redispatch_shared(hub, group, topic_filter, message, link.peer_node, hold)
        if hold is not None:
            hold.release()
    for hold in shared_holds.values():  # acknowledged by the member, not yet confirmed
        hold.release()


def redispatch_shared(
    hub: ClusterHub,
    group: str,
    topic_filter: str,
    message: Message,
    exclude: str,
    hold: DurableHold | None = None,
) -> None:
    """A shared-group message its chosen node had not acknowledged when the link dropped:
    another member gets it (``hold``, the publisher's
    held ack, is held by the member's record or link). It keeps its inbound id: where
    the chosen node's member had it, its claim is in Redis and this member's claim finds
    it (``core.shared_claims``), so the group is not given it twice; where that node
    never handled the frame, this member's claim wins."""
    broker = hub.broker
    local = broker.shared.get_group(group, topic_filter)
    if local is not None and len(local.members):
        # a persistent member's record holds it until written
        context = NO_DURABLE_CONTEXT if hold is None else DurableContext(hold)
        broker.publish_shared_from_peer(group, topic_filter, message, None, context)
        return
    remote = hub.table.shares.get_group(group, topic_filter)
    if remote is not None and any(node != exclude for node in remote.members):
        hub.forward_shared(group, topic_filter, message, hold)
        return
    orphaned = hub.table.shared_orphans.groups.get_group(group, topic_filter)
    if orphaned is not None and hub.orphans.to_shared_orphan(orphaned, message, hold):
        return  # no live member: queued for a dead owner's persistent member
    broker.stats.messages_dropped += 1

"""What this node knows about the other nodes' subscriptions.

* ``routes``: filter -> nodes with at least one non-shared subscriber (forwarding).
* ``shares``: ``(group, filter)`` -> nodes with members (one node picked per message).
* ``durable``: per node, the subscriptions of its persistent sessions. While a node is linked
  they are only kept; when its link drops they become ``orphans``: messages matching them are
  appended to the sessions' Redis queues until another node claims the session.
* ``pending``: per owner run, the persistent sessions of a run that held its lease when this
  node read them from Redis (at start, or rejoining) that no live node has announced since:
  messages for them go to that run (``OrphanAppends.to_unlinked``: after its link's HELLO,
  then DIRECT); they become orphans if it proves dead (``PendingOwners``).
* ``shared_orphans``: ``(group, filter)`` -> the orphaned persistent sessions that are members
  (announced with a ``$share/<group>/<filter>`` DSUB key by a peer with FEATURE_SHARED_DURABLE,
  or read from Redis): a message for a group with no live member anywhere is appended to one
  of them (``OrphanAppends.to_shared_orphan``), as a single node queues it for an offline
  persistent member.
* ``moved``: sessions this node handed over (kept a few seconds, same treatment as orphans, for
  messages still on their way here; not used for a message from or to a node that has
  announced the session in ``durable``: it delivers that message itself).

A link that resumes after a drop gets the peer's full snapshot again (``AnnouncedRoutes``
collects it); what this node still holds for the peer beyond it was removed while the link was
down and is dropped (``reconcile``).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from xmq.routing.shared_tree import SharedSubscriptions
from xmq.routing.subscription_tree import SubscriptionTree

NO_LOCAL = 1
RETAIN_AS_PUBLISHED = 2
SHARE_PREFIX = "$share/"


def shared_key(group: str, topic_filter: str) -> str:
    """The DSUB key of a persistent session's shared subscription (its MQTT filter)."""
    return f"{SHARE_PREFIX}{group}/{topic_filter}"


def group_of(key: str) -> str | None:
    """The share group a DSUB key names (``None``: a non-shared subscription's key)."""
    if not key.startswith(SHARE_PREFIX):
        return None
    end = key.find("/", len(SHARE_PREFIX))
    return key[len(SHARE_PREFIX) : end] if end > 0 else None


@dataclass(frozen=True, slots=True)
class DurableSub:
    """A persistent session's subscription as another node announced it."""

    key: str
    topic_filter: str
    qos: int
    flags: int
    since: int = -1
    """The announcing node's last forward-id number when it announced the session (-1: not
    said, an older node): its PUBLISH frames numbered higher were routed with it there."""
    group: str | None = None
    """The share group of a shared subscription (its key ``$share/<group>/<filter>``)."""


@dataclass(frozen=True, slots=True)
class OrphanSub:
    """A subscription of a session whose owner is gone (or that moved away from here)."""

    owner: tuple[str, int]
    qos: int
    flags: int


class OrphanIndex:
    """client id -> subscriptions whose messages go to the session's Redis queue."""

    __slots__ = ("by_client", "tree")

    def __init__(self) -> None:
        self.tree: SubscriptionTree[str, OrphanSub] = SubscriptionTree(1024)
        self.by_client: dict[str, list[str]] = {}

    def add(self, client_id: str, topic_filter: str, orphan: OrphanSub) -> None:
        self.tree.add(topic_filter, client_id, orphan)
        filters = self.by_client.setdefault(client_id, [])
        if topic_filter not in filters:
            filters.append(topic_filter)

    def drop(self, client_id: str) -> None:
        for topic_filter in self.by_client.pop(client_id, ()):
            self.tree.remove(topic_filter, client_id)

    def __len__(self) -> int:
        return len(self.by_client)


class SharedOrphanIndex:
    """(group, filter) -> orphaned persistent sessions that are members of that group."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: SharedSubscriptions[str, OrphanSub] = SharedSubscriptions()

    def add(self, client_id: str, group: str, topic_filter: str, orphan: OrphanSub) -> None:
        self.groups.add(group, topic_filter, client_id, orphan)

    def drop(self, client_id: str) -> None:
        for found in self.groups.groups_of(client_id):
            self.groups.remove(found.group, found.topic_filter, client_id)

    def adopt_into(self, other: SharedOrphanIndex) -> None:
        for found in self.groups.groups():
            for client_id, orphan in found.members.items():
                other.add(client_id, found.group, found.topic_filter, orphan)

    def __len__(self) -> int:
        return len(self.groups)


class PendingOrphans:
    """Sessions of an owner run that still had a lease when this node read them."""

    __slots__ = ("address", "index", "shared")

    def __init__(self, address: str) -> None:
        self.address = address
        self.index = OrphanIndex()
        self.shared = SharedOrphanIndex()  # their shared subscriptions

    def adopt_into(self, table: RouteTable) -> None:
        for client_id, filters in self.index.by_client.items():
            for topic_filter in filters:
                orphan = self.index.tree.get(topic_filter, client_id)
                if orphan is not None:
                    table.orphans.add(client_id, topic_filter, orphan)
        self.shared.adopt_into(table.shared_orphans)


@dataclass(slots=True)
class AnnouncedRoutes:
    """What a peer's route snapshot named, collected on a resumed link until SNAPSHOT_END."""

    routes: set[str] = field(default_factory=set)
    shares: set[tuple[str, str]] = field(default_factory=set)
    durable: set[tuple[str, str]] = field(default_factory=set)
    """(client id, subscription key) of the peer's persistent sessions"""


class RouteTable:
    """The other nodes' routes, shared groups and persistent subscriptions."""

    def __init__(self) -> None:
        self.routes: SubscriptionTree[str, bool] = SubscriptionTree()
        self.shares: SharedSubscriptions[str, bool] = SharedSubscriptions()
        self.durable: dict[str, dict[str, dict[str, DurableSub]]] = {}
        self.orphans = OrphanIndex()
        self.shared_orphans = SharedOrphanIndex()
        self.moved = OrphanIndex()
        self.pending: dict[tuple[str, int], PendingOrphans] = {}

    def route(self, node: str, topic_filter: str, added: bool) -> None:
        if added:
            self.routes.add(topic_filter, node, True)
        else:
            self.routes.remove(topic_filter, node)

    def share(self, node: str, group: str, topic_filter: str, added: bool) -> None:
        if added:
            self.shares.add(group, topic_filter, node, True)
        else:
            self.shares.remove(group, topic_filter, node)

    def durable_sub(self, node: str, client_id: str, sub: DurableSub, added: bool) -> None:
        sessions = self.durable.setdefault(node, {})
        if added:
            sessions.setdefault(client_id, {})[sub.key] = sub
            self.owned_live(client_id)  # a live node owns it now
        else:
            subs = sessions.get(client_id)
            if subs is not None:
                subs.pop(sub.key, None)

    def owned_live(self, client_id: str) -> None:
        """A live, linked node (or this one) has the session now: it is nobody's orphan, and
        no longer waits for the owner run it had when read from Redis."""
        self.orphans.drop(client_id)
        self.shared_orphans.drop(client_id)
        for pending in self.pending.values():
            pending.index.drop(client_id)
            pending.shared.drop(client_id)

    def durable_gone(self, node: str, epoch: int, client_id: str, orphan: bool) -> None:
        """A persistent session left ``node``: until a new owner announces it, it is an orphan.

        (A session that ended had its subscriptions withdrawn first: nothing is orphaned.)
        """
        subs = self.durable.get(node, {}).pop(client_id, None)
        if not subs or not orphan:
            return
        for durable in subs.values():
            entry = OrphanSub((node, epoch), durable.qos, durable.flags)
            if durable.group is not None:
                self.shared_orphans.add(client_id, durable.group, durable.topic_filter, entry)
            else:
                self.orphans.add(client_id, durable.topic_filter, entry)

    def forget_node(
        self, node: str, epoch: int, orphan: bool, here: Container[str] = ()
    ) -> OrphanIndex:
        """A node's link is gone: drop its routes; its persistent sessions become orphans —
        except those whose client id has a session ``here`` already (it moved here while the
        link was down: its own subscriptions route its messages now).

        Returns the entries orphaned now (for messages the node may not have recorded), those
        of sessions here included: what was sent to the node for them still has to reach them.
        Shared subscriptions go to ``shared_orphans`` (not returned: a shared message the node
        had not confirmed is dispatched to the group again, ``ClusterHub.settle_shared``).
        """
        fresh = OrphanIndex()
        for topic_filter in [f for f, key, _ in self.routes.items() if key == node]:
            self.routes.remove(topic_filter, node)
        for group in self.shares.groups_of(node):
            self.shares.remove(group.group, group.topic_filter, node)
        sessions = self.durable.pop(node, {})
        if not orphan:
            return fresh
        for client_id, subs in sessions.items():
            for durable in subs.values():
                entry = OrphanSub((node, epoch), durable.qos, durable.flags)
                if durable.group is not None:
                    if client_id not in here:
                        self.shared_orphans.add(
                            client_id, durable.group, durable.topic_filter, entry
                        )
                    continue
                if client_id not in here:
                    self.orphans.add(client_id, durable.topic_filter, entry)
                fresh.add(client_id, durable.topic_filter, entry)
        return fresh

    def reconcile(self, node: str, announced: AnnouncedRoutes) -> int:
        """A resumed link's snapshot is complete: drop what ``node`` holds here that it did not
        name (removed while the link was down). Returns how many entries were dropped.

        A persistent session it no longer names ended or moved: its subscriptions are dropped,
        not orphaned (its new owner announces it; an ended one has nothing to keep).
        """
        dropped = 0
        for topic_filter in [f for f, key, _ in self.routes.items() if key == node]:
            if topic_filter not in announced.routes:
                self.routes.remove(topic_filter, node)
                dropped += 1
        for group in self.shares.groups_of(node):
            if (group.group, group.topic_filter) not in announced.shares:
                self.shares.remove(group.group, group.topic_filter, node)
                dropped += 1
        sessions = self.durable.get(node, {})
        for client_id in list(sessions):
            subs = sessions[client_id]
            for key in [k for k in subs if (client_id, k) not in announced.durable]:
                del subs[key]
                dropped += 1
            if not subs:
                del sessions[client_id]
        return dropped

"""When a session read from Redis as a live run's stops waiting for that run (``table.pending``).

A node that starts or rejoins reads the persistent sessions from Redis (``orphan_loader``);
those whose owner run still held its lease wait per owner run in ``RouteTable.pending``, and a
message matching one goes to that run (``OrphanAppends.to_unlinked``: after its link's HELLO,
then with DIRECT; the owner holds it during its claim, or appends it to the session's queue).
A session leaves the list only when:

* a live node announces it (DSUB: ``RouteTable.owned_live``, at once);
* its owner run is gone (a lease of another epoch, or, not linked, its link port refuses):
  the run's sessions become orphans, appended to their Redis queues;
* Redis says it is no longer that run's (re-checked every ``recheck_s``, at most
  ``RECHECK_BATCH`` sessions per pass, one ``MGET``): the owner record is gone (the session
  ended: dropped) or names another run (filed under that run: pending when it holds a lease,
  else an orphan of it; dropped when it is this node's own run). A session a linked node had
  announced before this node read it from Redis is dropped there too.

The link to the owner run does *not* end the wait: a run that owns a session in Redis without
having announced it (its claim still attaching it, or its client gone during the claim) would
leave a message for it matching nothing here — PUBACK 0x10, lost (issue 12).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence

from xmq.cluster.route_table import OrphanIndex, OrphanSub, PendingOrphans, RouteTable
from xmq.contract.keys import ClusterKeys
from xmq.contract.records import NodeLease, SessionOwner

log = logging.getLogger("xmq.cluster.pending")

Owner = tuple[str, int]
RECHECK_BATCH = 500


ReadOwners = Callable[[list[str]], Awaitable[Sequence[bytes | str | None]]]
"""Reads owner record keys from Redis in one call (``MGET``); ``None`` for a missing one."""


class PendingOwners:
    """Settles ``table.pending``: adopts dead runs' sessions, re-checks the rest in Redis."""

    __slots__ = (
        "_due",
        "_next_round",
        "clock",
        "keys",
        "linked_epoch",
        "own_run",
        "reachable",
        "rechecked",
        "read_owners",
        "recheck_s",
        "table",
    )

    def __init__(
        self,
        table: RouteTable,
        linked_epoch: Callable[[str], int | None],
        reachable: Callable[[str], Awaitable[bool]],
        read_owners: ReadOwners,
        keys: ClusterKeys,
        own_run: Callable[[], Owner],
        clock: Callable[[], float],
        recheck_s: float,
    ) -> None:
        self.table = table
        self.linked_epoch = linked_epoch  # the epoch of the run a node is linked with
        self.reachable = reachable  # False: its link port refuses (nothing listens)
        self.read_owners = read_owners
        self.keys = keys
        self.own_run = own_run
        self.clock = clock
        self.recheck_s = recheck_s
        self.rechecked = 0  # sessions whose owner record was read again (a count)
        self._due: deque[tuple[Owner, str]] = deque()
        self._next_round: float | None = None  # the first round: ``recheck_s`` after the first pass

    async def settle(self, peers: Mapping[str, NodeLease]) -> None:
        """One pass: runs gone are adopted as orphans; linked or alive ones keep waiting;
        then up to ``RECHECK_BATCH`` sessions are re-checked in Redis when a round is due."""
        table = self.table
        for key, pending in list(table.pending.items()):
            if not len(pending.index) and not len(pending.shared):
                del table.pending[key]  # every session of it was announced or left
                continue
            node, epoch = key
            if self.linked_epoch(node) == epoch:
                continue  # alive and linked: its sessions wait for their announcement
            lease = peers.get(node)
            gone = lease is not None and lease.epoch != epoch
            dead = gone or not await self.reachable(pending.address)
            if dead and table.pending.get(key) is pending:  # (not re-filed meanwhile)
                pending.adopt_into(table)
                del table.pending[key]
        await self.recheck(peers)

    async def recheck(self, peers: Mapping[str, NodeLease]) -> int:
        """Read the owner records of the next sessions due; return how many were read."""
        due = self._due
        if not due:
            now = self.clock()
            if self._next_round is None:
                self._next_round = now + self.recheck_s
            if now < self._next_round:
                return 0
            self._next_round = now + self.recheck_s
            for key, pending in self.table.pending.items():
                due.extend((key, client_id) for client_id in pending.index.by_client)
        batch = [due.popleft() for _ in range(min(RECHECK_BATCH, len(due)))]
        if not batch:
            return 0
        keys = self.keys
        raw = await self.read_owners([keys.session_owner(client_id) for _, client_id in batch])
        for (key, client_id), record in zip(batch, raw, strict=True):
            self._checked(key, client_id, record, peers)
        self.rechecked += len(batch)
        return len(batch)

    def _checked(
        self, key: Owner, client_id: str, record: bytes | str | None, peers: Mapping[str, NodeLease]
    ) -> None:
        table = self.table
        pending = table.pending.get(key)
        if pending is None or client_id not in pending.index.by_client:
            return  # it left meanwhile (announced, or its run was adopted)
        if any(sessions.get(client_id) for sessions in table.durable.values()):
            pending.index.drop(client_id)  # announced before it was read from Redis
            return
        if record is None:
            pending.index.drop(client_id)  # the session ended
            return
        owner = SessionOwner.from_json(record)
        now = (owner.node_id, owner.epoch)
        if now == key:
            return  # still that run's: it keeps waiting for its announcement
        entries = _take(pending.index, client_id)
        if now == self.own_run():
            return  # this node holds or claims it: its own subscriptions route it
        lease = peers.get(owner.node_id)
        if lease is not None and lease.epoch == owner.epoch:
            target = table.pending.get(now)
            if target is None:
                target = table.pending[now] = PendingOrphans(lease.address)
            index = target.index
        else:
            index = table.orphans  # a dead run's: its queue
        for topic_filter, orphan in entries:
            index.add(client_id, topic_filter, OrphanSub(now, orphan.qos, orphan.flags))
        log.debug("pending session %r now owned by %s (epoch %d)", client_id, *now)


def _take(index: OrphanIndex, client_id: str) -> list[tuple[str, OrphanSub]]:
    """Remove ``client_id``'s entries from ``index``; return them."""
    entries = []
    for topic_filter in index.by_client.get(client_id, ()):
        orphan = index.tree.get(topic_filter, client_id)
        if orphan is not None:
            entries.append((topic_filter, orphan))
    index.drop(client_id)
    return entries

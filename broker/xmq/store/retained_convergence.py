"""Which retained topics a node must re-read from Redis after changes made at once (sans-IO).

Two nodes changing one retained topic at the same instant each apply the other's change after
their own (it crosses on the link), while Redis keeps the one ``SET_RETAINED`` gave the higher
revision. So each change's origin, once Redis has answered its write with revision r (0: not
stored), announces it to its peers (``RETAINED_WRITTEN``, forward id and r); its own reply is
its own announcement. Per topic a node keeps, while changes it applied await their
announcement, a :class:`_Pending` entry; when the last one is announced the entry goes and the
node knows whether it holds Redis's value:

- the change it holds last got revision r, and no announced revision of the topic is higher:
  it holds Redis's (the common case, one change at a time: nothing more happens);
- a higher revision was announced (possibly of a change applied before, here or long ago:
  ``revisions``; or of a change never applied here, lost with a link), or the held change was
  not stored while other changes overlapped it, or a peer's link was lost before it announced:
  the topic is re-read from Redis.

Memory: one entry per topic with changes in flight, removed as they settle; announcements
that overtook their change (a PUBLISH sent again on a resumed link) wait in ``early``, at most
``EARLY_KEPT`` of them.
"""

from __future__ import annotations

from typing import Final

Change = tuple[str, str]
"""(origin node, id): a peer's change is ``(node id, forward id)``, this node's ``("", n)``."""

EARLY_KEPT: Final = 1024


class _Pending:
    """The changes of one topic applied here and not announced yet."""

    __slots__ = ("held", "held_revision", "lost", "overlapped", "waiting")

    def __init__(self, held: Change) -> None:
        self.waiting: set[Change] = set()
        self.held = held  # the change applied last (the one this node holds)
        self.held_revision = 0  # its revision once announced (0: unknown or not stored)
        self.overlapped = False  # two changes were in flight here at once
        self.lost = False  # a peer's link dropped before it announced a change


class RetainedConvergence:
    """Counts the retained changes in flight per topic; says which topics to re-read."""

    def __init__(self, revisions: dict[str, int]) -> None:
        self.revisions = revisions  # topic -> highest revision known (shared with the sync)
        self.pending: dict[str, _Pending] = {}
        self.early: dict[Change, int] = {}

    def applied(self, topic: str, change: Change) -> bool:
        """A change of ``topic`` was applied here (after any other); True: re-read it (its
        announcement had come first and said so)."""
        entry = self.pending.get(topic)
        if entry is None:
            entry = self.pending[topic] = _Pending(change)
        else:
            entry.overlapped = True
            entry.held = change
            entry.held_revision = 0
        revision = self.early.pop(change, -1)
        if revision < 0:
            entry.waiting.add(change)
            return False
        entry.held_revision = revision
        return self._settle(topic, entry)

    def unannounced(self, topic: str) -> None:
        """A change of ``topic`` from a peer that announces no writes (an older node) was
        applied here: while others are in flight, Redis decides once they settle."""
        entry = self.pending.get(topic)
        if entry is not None:
            entry.overlapped = True
            entry.held = ("", "")
            entry.held_revision = 0

    def written(self, topic: str, change: Change, revision: int) -> bool:
        """``change`` of ``topic`` was written to Redis with ``revision`` (0: not stored);
        True: this node must re-read the topic."""
        known = self.revisions.get(topic, 0)
        if revision > known:
            self.revisions[topic] = revision
        entry = self.pending.get(topic)
        if entry is None or change not in entry.waiting:
            # its change not applied here: lost with a link (or still to come, sent again on
            # a resumed link: kept for then). Newer than what this node knows: re-read.
            early = self.early
            early[change] = revision
            if len(early) > EARLY_KEPT:
                del early[next(iter(early))]
            if revision <= known:
                return False
            if entry is None:
                return True
            entry.lost = True  # when the changes in flight settle
            return False
        entry.waiting.discard(change)
        if change == entry.held:
            entry.held_revision = revision
        return self._settle(topic, entry)

    def link_lost(self, node: str) -> list[str]:
        """The link to ``node`` dropped: its unannounced changes never will be; the topics
        that settle by that, to re-read."""
        settled: list[str] = []
        for topic, entry in list(self.pending.items()):
            if any(origin == node for origin, _ in entry.waiting):
                entry.waiting = {change for change in entry.waiting if change[0] != node}
                entry.lost = True
                if self._settle(topic, entry):
                    settled.append(topic)
        for change in [change for change in self.early if change[0] == node]:
            del self.early[change]
        return settled

    def _settle(self, topic: str, entry: _Pending) -> bool:
        if entry.waiting:
            return False
        del self.pending[topic]
        if entry.lost:
            return True
        if entry.held_revision:
            return entry.held_revision < self.revisions.get(topic, 0)
        return entry.overlapped  # the held change not stored: Redis holds another one

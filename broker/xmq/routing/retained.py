"""The retained-message index: topic -> message, searchable by topic filter.

Messages are opaque (`M`); expiry and cluster revisions are the caller's business. Topics are
stored in a trie of topic levels so that `a/+/c` visits only the `a/*/c` branch and `#` walks
only what it returns. A leading `+` or `#` skips topics whose first level starts with `$`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from xmq.routing.topics import LEVEL_SEPARATOR, MULTI_LEVEL_WILDCARD, SINGLE_LEVEL_WILDCARD

M = TypeVar("M")


class _TopicNode(Generic[M]):
    """One topic level; `entry` is `(topic, message)` when a message is retained here, set at
    store revision `revision`."""

    __slots__ = ("parent", "level", "children", "entry", "revision")

    def __init__(self, parent: _TopicNode[M] | None, level: str) -> None:
        self.parent = parent
        self.level = level
        self.children: dict[str, _TopicNode[M]] = {}
        self.entry: tuple[str, M] | None = None
        self.revision = 0


def _no_cost(message: object) -> int:
    return 0


class RetainedStore(Generic[M]):
    """Retained messages by topic name, with filter look-ups through a topic-level trie.

    ``cost(message)`` gives the bytes one retained message is counted for (``bytes``); every
    ``set`` bumps ``revision``, so a walk can skip what was retained after it began.
    """

    __slots__ = ("_cost", "_nodes", "_root", "bytes", "revision")

    def __init__(self, cost: Callable[[M], int] = _no_cost) -> None:
        self._root: _TopicNode[M] = _TopicNode(None, "")
        self._nodes: dict[str, _TopicNode[M]] = {}
        self._cost = cost
        self.bytes = 0
        self.revision = 0

    def set(self, topic: str, message: M) -> None:
        """Retain `message` on `topic` (a valid topic name), replacing any previous one."""
        node = self._nodes.get(topic)
        if node is None:
            node = self._root
            for level in topic.split(LEVEL_SEPARATOR):
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = _TopicNode(node, level)
                node = child
            self._nodes[topic] = node
        elif node.entry is not None:
            self.bytes -= self._cost(node.entry[1])
        self.bytes += self._cost(message)
        self.revision += 1
        node.revision = self.revision
        node.entry = (topic, message)

    def cost_of_set(self, topic: str, message: M) -> int:
        """How much ``bytes`` would grow if `message` replaced what `topic` retains now."""
        node = self._nodes.get(topic)
        previous = 0 if node is None or node.entry is None else self._cost(node.entry[1])
        return self._cost(message) - previous

    def delete(self, topic: str) -> bool:
        """Forget the message retained on `topic`; False when there was none."""
        node = self._nodes.pop(topic, None)
        if node is None:
            return False
        if node.entry is not None:
            self.bytes -= self._cost(node.entry[1])
        node.entry = None
        parent = node.parent
        # (the entry test after the move, not in the loop condition: mypyc kept the
        # narrowing of ``node.entry`` to None across ``node = parent``)
        while parent is not None and not node.children:
            del parent.children[node.level]
            node = parent
            if node.entry is not None:
                break
            parent = node.parent
        return True

    def get(self, topic: str) -> M | None:
        node = self._nodes.get(topic)
        if node is None or node.entry is None:
            return None
        return node.entry[1]

    def match(self, flt: str) -> list[tuple[str, M]]:
        """Every `(topic, message)` retained on a topic matching the (valid) filter `flt`."""
        return list(self.walk(flt))

    def walk(self, flt: str, up_to: int | None = None) -> Iterator[tuple[str, M]]:
        """The `(topic, message)` pairs matching `flt`, lazily: one node at a time.

        Safe to suspend across changes to the store: a message set at a revision above
        `up_to` (default: the revision when the walk starts, at its first ``next``) or deleted
        before it is reached is not yielded, and no topic is yielded twice.
        """
        limit = self.revision if up_to is None else up_to
        if SINGLE_LEVEL_WILDCARD not in flt and MULTI_LEVEL_WILDCARD not in flt:
            exact = self._nodes.get(flt)
            if exact is not None and exact.entry is not None and exact.revision <= limit:
                yield exact.entry
            return
        nodes = [self._root]
        for depth, level in enumerate(flt.split(LEVEL_SEPARATOR)):
            if level == MULTI_LEVEL_WILDCARD:
                yield from _walk_subtrees(nodes, limit, skip_system=depth == 0)
                return
            following: list[_TopicNode[M]] = []
            if level == SINGLE_LEVEL_WILDCARD:
                if depth == 0:
                    following.extend(
                        child
                        for name, child in self._root.children.items()
                        if not name.startswith("$")
                    )
                else:
                    for node in nodes:
                        following.extend(node.children.values())
            else:
                for node in nodes:
                    child = node.children.get(level)
                    if child is not None:
                        following.append(child)
            if not following:
                return
            nodes = following
        for node in nodes:
            entry = node.entry
            if entry is not None and node.revision <= limit:
                yield entry

    def remove_where(self, predicate: Callable[[str, M], bool]) -> int:
        """Delete every retained message for which `predicate(topic, message)` holds.

        For the periodic expiry sweep; returns how many were deleted.
        """
        doomed = [
            topic
            for topic, node in self._nodes.items()
            if node.entry is not None and predicate(topic, node.entry[1])
        ]
        for topic in doomed:
            self.delete(topic)
        return len(doomed)

    def items(self) -> Iterator[tuple[str, M]]:
        """Every `(topic, message)` retained (do not set or delete while iterating)."""
        for node in self._nodes.values():
            if node.entry is not None:
                yield node.entry

    def __contains__(self, topic: object) -> bool:
        return topic in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def __bool__(self) -> bool:
        return bool(self._nodes)


def _walk_subtrees(
    starts: list[_TopicNode[M]], limit: int, *, skip_system: bool
) -> Iterator[tuple[str, M]]:
    """The entries of each start node (`#` also matches the parent level) and its descendants
    retained at or below revision `limit`.

    `skip_system` leaves out the start nodes' children whose level starts with `$` (a leading
    `#`). Children are copied onto the stack before an entry is yielded, so the walk holds no
    live dictionary iterator while suspended.
    """
    for start in starts:
        entry = start.entry
        if skip_system:
            stack = [child for name, child in start.children.items() if not name.startswith("$")]
        else:
            stack = list(start.children.values())
        stack.reverse()
        if entry is not None and start.revision <= limit:
            yield entry
        while stack:
            node = stack.pop()
            if node.children:
                children = list(node.children.values())
                children.reverse()
                stack.extend(children)
            entry = node.entry
            if entry is not None and node.revision <= limit:
                yield entry

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
    """One topic level; `entry` is `(topic, message)` when a message is retained here."""

    __slots__ = ("parent", "level", "children", "entry")

    def __init__(self, parent: _TopicNode[M] | None, level: str) -> None:
        self.parent = parent
        self.level = level
        self.children: dict[str, _TopicNode[M]] = {}
        self.entry: tuple[str, M] | None = None


class RetainedStore(Generic[M]):
    """Retained messages by topic name, with filter look-ups through a topic-level trie."""

    __slots__ = ("_root", "_nodes")

    def __init__(self) -> None:
        self._root: _TopicNode[M] = _TopicNode(None, "")
        self._nodes: dict[str, _TopicNode[M]] = {}

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
        node.entry = (topic, message)

    def delete(self, topic: str) -> bool:
        """Forget the message retained on `topic`; False when there was none."""
        node = self._nodes.pop(topic, None)
        if node is None:
            return False
        node.entry = None
        parent = node.parent
        while parent is not None and node.entry is None and not node.children:
            del parent.children[node.level]
            node = parent
            parent = node.parent
        return True

    def get(self, topic: str) -> M | None:
        node = self._nodes.get(topic)
        if node is None or node.entry is None:
            return None
        return node.entry[1]

    def match(self, flt: str) -> list[tuple[str, M]]:
        """Every `(topic, message)` retained on a topic matching the (valid) filter `flt`."""
        if SINGLE_LEVEL_WILDCARD not in flt and MULTI_LEVEL_WILDCARD not in flt:
            exact = self._nodes.get(flt)
            if exact is None or exact.entry is None:
                return []
            return [exact.entry]
        found: list[tuple[str, M]] = []
        nodes = [self._root]
        for depth, level in enumerate(flt.split(LEVEL_SEPARATOR)):
            if level == MULTI_LEVEL_WILDCARD:
                for node in nodes:
                    _collect_subtree(node, found, skip_system=depth == 0)
                return found
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
                return found
            nodes = following
        found.extend(entry for node in nodes if (entry := node.entry) is not None)
        return found

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


def _collect_subtree(
    start: _TopicNode[M], found: list[tuple[str, M]], *, skip_system: bool
) -> None:
    """Append the entries of `start` (`#` also matches the parent level) and its descendants.

    `skip_system` leaves out `start`'s children whose level starts with `$` (a leading `#`).
    """
    if start.entry is not None:
        found.append(start.entry)
    if skip_system:
        stack = [child for name, child in start.children.items() if not name.startswith("$")]
    else:
        stack = list(start.children.values())
    append = found.append
    while stack:
        node = stack.pop()
        if node.entry is not None:
            append(node.entry)
        if node.children:
            stack.extend(node.children.values())

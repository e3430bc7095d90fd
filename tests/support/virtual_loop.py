"""A virtual event loop for unit tests of code that slices its work over loop turns.

It implements only what such code calls (``time``, ``call_soon``, ``call_later``,
``call_at``) and runs nothing by itself: ``run_turn`` runs the callbacks that were ready when
the turn began, as one turn of a real loop does, and ``advance`` moves the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class VirtualHandle:
    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualLoop:
    """Time stands still until ``advance``; callbacks run only in ``run_turn``."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.handles: list[VirtualHandle] = []
        self.turns = 0

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> VirtualHandle:
        return self.call_at(self.now, callback, *args)

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> VirtualHandle:
        return self.call_at(self.now + delay, callback, *args)

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> VirtualHandle:
        handle = VirtualHandle(when, callback, args)
        self.handles.append(handle)
        return handle

    def pending(self) -> int:
        return sum(1 for handle in self.handles if not handle.cancelled)

    def run_turn(self) -> int:
        """Run the callbacks due now (not those they schedule); return how many ran."""
        due = [h for h in self.handles if h.when <= self.now and not h.cancelled]
        self.handles = [h for h in self.handles if h.when > self.now and not h.cancelled]
        for handle in due:
            if not handle.cancelled:
                handle.callback(*handle.args)
        self.turns += 1
        return len(due)

    def advance(self, seconds: float) -> None:
        self.now += seconds

"""Which logins run inline: an (authenticator, authorizer) pair that answers at once.

``core.login_flow`` logs a client in within ``handle`` (no task, no coroutine, no loop tick)
when both its authenticator and its authorizer are marked ``inline`` (in memory, never
waiting) and their ``decide`` / ``acl_now`` are written by the same class as their
``authenticate`` / ``acl_for``: a subclass that overrides only the coroutine, one that waits,
is asked through the coroutine. ``is_inline_pair`` knows the answer per pair of classes and
compares the last pair asked first. Compiled (``xmq.native_build``): asked once per connect.
"""

from __future__ import annotations

from typing import Final


def is_inline_pair(authenticator: object, authorizer: object) -> bool:
    """A login that needs no task nor coroutine: an authenticator and an authorizer marked
    ``inline`` (in memory, never waiting), whose ``decide`` / ``acl_now`` give the answers of
    their ``authenticate`` / ``acl_for`` (each pair written by the same class: a subclass that
    overrides only the coroutine, one that waits, is not inline). Known per class; the last
    pair asked is compared first (every connection of a listener has the same pair: no key
    tuple nor dict lookup per connect)."""
    first = type(authenticator)
    second = type(authorizer)
    last = _LAST_PAIR
    if first is last.authenticator and second is last.authorizer:
        return last.inline
    key = (first, second)
    known = _INLINE_CLASSES.get(key)
    if known is None:
        known = _INLINE_CLASSES[key] = _pair_of(first, "decide", "authenticate") and _pair_of(
            second, "acl_now", "acl_for"
        )
    last.authenticator = first
    last.authorizer = second
    last.inline = known
    return known


class _LastPair:
    """The classes of the last (authenticator, authorizer) pair ``is_inline_pair`` was asked
    about, and its answer."""

    def __init__(self) -> None:
        self.authenticator: type | None = None
        self.authorizer: type | None = None
        self.inline = False


_INLINE_CLASSES: dict[tuple[type, type], bool] = {}
_LAST_PAIR: Final = _LastPair()


def _pair_of(cls: type, now: str, later: str) -> bool:
    """``cls`` is marked ``inline`` and its ``now`` and ``later`` methods come from one class."""
    if getattr(cls, "inline", False) is not True:
        return False
    owners = [next((k for k in cls.__mro__ if name in k.__dict__), None) for name in (now, later)]
    return owners[0] is not None and owners[0] is owners[1]

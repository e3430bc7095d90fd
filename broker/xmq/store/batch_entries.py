"""What a :class:`~xmq.store.redis_batcher.RedisBatcher` queues: commands (``BatchEntry``),
durable writes to coalesce (``CoalescedItem``), script calls, and the hand-out of a reply to
whoever waits for it.

An entry is its own reply callback (no closure made per command): its reply goes to the
batcher that sent it (``BatcherLink.replied``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from mypy_extensions import mypyc_attr  # a runtime dependency (pyproject): a no-op when pure

from xmq.store.resp_connection import encode_command

if TYPE_CHECKING:
    from xmq.store.batcher_link import BatcherLink

log = logging.getLogger("xmq.store.batcher")

Callback = Callable[[Any], None]
Guard = Callable[[], bool]

ScriptCall = tuple[str, tuple[Any, ...], bytes]
"""A script call ready to send: its text (for ``EVAL`` after a ``NOSCRIPT`` reply), its
``EVALSHA`` command's arguments and their RESP encoding (see :func:`script_call`)."""

Combine = Callable[[Any, list[Any], bool, bool], ScriptCall]
"""``combine(group, items, once, bare)``: the script call carrying ``items``; ``once``: the form
to send again after a lost connection (it may have been applied); ``bare``: its arguments may
be left out (``()``): the first send writes the payload only, and a retry or a log line asks
for them again (``BatchEntry.arguments``) — at low rates no argument tuple is made and freed
per message."""

_SHAS: dict[str, str] = {}


def script_sha(text: str) -> str:
    """The script's id in Redis (``EVALSHA``)."""
    sha = _SHAS.get(text)
    if sha is None:
        sha = _SHAS[text] = hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - Redis's id
    return sha


def script_call(text: str, keys: tuple[Any, ...], args: tuple[Any, ...]) -> ScriptCall:
    """The ``EVALSHA`` call of a script, encoded."""
    command = ("EVALSHA", script_sha(text), len(keys), *keys, *args)
    return text, command, encode_command(command)


CoalescedItem = tuple[Combine, Any, Any, tuple[str, ...], Callback]
"""A write queued to be coalesced with its neighbours into one script call: (``combine``,
``group``, the item, the keys it writes, its callback). A plain tuple: one per durable record,
made without a Python call. (An item is a durable write: kept, never failed fast.)"""


@mypyc_attr(free_list_len=1)
class BatchEntry:
    """One command (or one script call of coalesced writes) queued, sent, retried.

    Compiled, the last one freed is kept for the next one made (``free_list_len=1``, as
    ``Delivery`` and ``Message``): at low rates a pipeline is one entry, freed at its reply,
    and the next pipeline's is made from it, without the allocator's ``malloc`` and ``free``."""

    __slots__ = (
        "args",
        "batcher",
        "callback",
        "failing_since",
        "guard",
        "if_lost",
        "items",
        "payload",
        "retry",
        "script",
        "sent_at",
    )

    def __init__(
        self,
        args: tuple[Any, ...],
        callback: Callback | None,
        retry: bool,
        guard: Guard | None,
        script: str | None,
        items: list[CoalescedItem] | None = None,
        payload: bytes = b"",
    ) -> None:
        self.args = args
        self.callback = callback
        self.retry = retry
        self.guard = guard
        self.script = script  # the full text, for EVAL after a NOSCRIPT reply
        self.payload = payload or encode_command(args)
        self.failing_since = 0.0  # loop time of the first failure (0: none yet)
        self.if_lost: tuple[Any, ...] | None = None  # sent instead after a lost connection
        self.items = items  # a coalesced call: its items, each answered with its element
        self.batcher: BatcherLink | None = None  # the batcher it was sent by (``__call__``)
        # loop time its pipeline was sent, when it ends it and the pipeline is timed (one in
        # ``BatcherLink.rtt_every``), else 0
        self.sent_at = 0.0

    def __call__(self, reply: Any) -> None:
        """Its reply (the entry is its own reply callback: no closure made per command)."""
        batcher = self.batcher
        if batcher is not None:
            batcher.replied(self, reply)

    def arguments(self) -> tuple[Any, ...]:
        """The command's arguments: a coalesced call's are built now if its first send left
        them out (``combine(..., bare=True)``)."""
        args = self.args
        items = self.items
        if not args and items is not None:
            first = items[0]
            args = self.args = first[0](first[1], [item[2] for item in items], False, False)[1]
        return args

    def rewrite(self, args: tuple[Any, ...]) -> None:
        self.args = args
        self.payload = encode_command(args)


MAX_COALESCED: Final = 512
"""Items of one coalesced script call at most (bounds the time Redis spends in one script)."""

MAX_PIPELINE_ITEMS: Final = 4 * MAX_COALESCED
"""Coalesced items (durable records) of one pipeline at most: the rest go in the next one. It
bounds what a connect-path call sent next waits for in Redis (the batch in flight)."""


def ignore(reply: Any) -> None:
    """A placeholder, replaced before the pipeline is sent."""


def answer(entry: BatchEntry, reply: Any) -> None:
    """Its reply to whoever waits for the entry (each item of a coalesced call its part)."""
    if entry.items is not None:
        hand_out(entry.items, reply)
    elif entry.callback is not None:
        try:
            entry.callback(reply)
        except Exception:
            log.exception("redis reply callback failed")


def hand_out(items: list[CoalescedItem], reply: Any) -> None:
    """The reply of a coalesced call, handed out per item (an error to each of them)."""
    # (items read as tuples of any length: compiled, an item is not unpacked whole into a
    # five-field struct, each field checked, to call its last)
    seen = cast("list[tuple[Any, ...]]", items)
    if type(reply) is list and len(reply) == len(seen):
        for n, item in enumerate(seen):
            try:
                item[4](reply[n])
            except Exception:
                log.exception("redis reply callback failed")
        return
    for item in seen:
        try:
            item[4](reply)
        except Exception:
            log.exception("redis reply callback failed")

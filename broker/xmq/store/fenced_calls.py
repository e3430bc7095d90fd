"""The ``FENCED_WRITES`` calls of one run, encoded for the batcher (``RedisBatcher.coalesced``).

The script's argument layout is :class:`xmq.contract.session_scripts.FencedWrites`'s; this
module encodes it cheaply (a test holds each call to the layout's generic encoding). At 50
messages/s a batch carries one write, and encoding its thirteen arguments with
``hiredis.pack_command`` costs ~18,000 instructions (a ``sprintf`` per argument), more than
the rest of the record's path in the store: a one-write call is instead one ``bytes`` format
into a template whose constant parts (the script's sha, the lease key, the epoch and the
seen-marker TTL) were encoded once, when the run's epoch became known. A batch of several
writes is encoded argument by argument.

At 50 messages/s a call is most often a pair: the acknowledged record's removal and the next
record (of one session, or of two). Its keys' bulk strings are kept (a session's queue key is
one object while ``SessionRecords.queue_key`` keeps it, so the look-up finds its hash made),
its ops and key indexes and its values' length heads come from tables: one literal format of
ten parts, no ``%d`` conversion and no ``str.encode`` per call. The batcher calls a pair's
first send directly (``first_send``, compiled), not through the generic ``Combine`` callable.
"""

from __future__ import annotations

from typing import Any, Final, cast

from xmq.contract.keys import ClusterKeys
from xmq.contract.session_scripts import (
    FENCED_WRITES,
    INBOUND_MARK_TTL_MS,
    FencedWrite,
    FencedWrites,
)
from xmq.store.batch_entries import CoalescedItem, ScriptCall, script_sha
from xmq.store.resp_connection import encode_command


def _bulk(value: str | int) -> bytes:
    data = str(value).encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


_LENGTHS: Final = tuple(b"$%d\r\n" % n for n in range(1024))
"""The head of a bulk string of each length below 1,024 (a record at low rates: no ``%d``
conversion, no ``bytes`` made per value)."""

_BULKS_MAX: Final = 4096
"""Keys whose bulk string is kept (``FencedCalls._bulk_of``); more: all made again."""

_RECORD_AT: Final = tuple(b"$1\r\nr\r\n$1\r\n%d\r\n" % at for at in (2, 3))
_REMOVAL_AT: Final = tuple(b"$1\r\nl\r\n$1\r\n%d\r\n" % at for at in (2, 3))
"""A record's (removal's) op and its key index (2: the first key after the lease, 3: the
next), encoded."""


def _length(n: int) -> bytes:
    """``$<n>\\r\\n``: a bulk string's head."""
    return _LENGTHS[n] if n < 1024 else b"$%d\r\n" % n


def _op_at(op: str, at: int) -> bytes:
    """A write's op and its key index ``at`` (2 or 3), encoded (a record's and a removal's
    from a table: no dictionary look-up, no ``bytes`` made)."""
    if op == "r":
        return _RECORD_AT[at - 2]
    if op == "l":
        return _REMOVAL_AT[at - 2]
    return b"$1\r\n%b\r\n$1\r\n%d\r\n" % (op.encode(), at)


class FencedCalls:
    """The calls of the run (``node_id``, ``epoch``); the batcher coalesces the writes of one
    ``FencedCalls`` (``combine``, this object as the group) into one call per flush."""

    __slots__ = (
        "epoch",
        "node_id",
        "_bulks",
        "_constants",
        "_heads",
        "_layout",
        "_lease",
        "_lease_bulk",
        "_pair_heads",
        "_sha",
        "_sha_bulk",
        "_text",
        "_ttls",
    )

    def __init__(
        self,
        keys: ClusterKeys,
        writer: tuple[str, int],
        seen_ttl_ms: int,
        mark_ttl_ms: int = INBOUND_MARK_TTL_MS,
    ) -> None:
        self.node_id, self.epoch = writer
        self._layout = FencedWrites(keys, writer, seen_ttl_ms, mark_ttl_ms)
        self._text = FENCED_WRITES  # (an attribute: a module's import is a look-up per use)
        self._sha = script_sha(FENCED_WRITES)
        self._lease = keys.lease(writer[0])
        self._ttls = (seen_ttl_ms, mark_ttl_ms)
        self._constants = _bulk(writer[1]) + _bulk(seen_ttl_ms) + _bulk(mark_ttl_ms)
        self._sha_bulk = _bulk(self._sha)
        self._lease_bulk = _bulk(self._lease)
        # two writes without markers: 18 arguments, 2 keys (lease, the key of both); 19 and 3
        # when they write two keys
        self._pair_heads = tuple(
            b"*%d\r\n$7\r\nEVALSHA\r\n%b%b%b"
            % (16 + n, _bulk(self._sha), _bulk(n), _bulk(self._lease))
            for n in (2, 3)
        )
        # key -> its bulk string (a session's queue: the same key object each time, its hash
        # kept; ``SessionRecords.queue_key``)
        self._bulks: dict[str, bytes] = {}
        # one write: 13 arguments, 2 keys (lease, key); 14 and 3 with a seen marker (or an
        # inbound claim's marker index), 15 and 4 with a marker and its index
        self._heads = tuple(
            b"*%d\r\n$7\r\nEVALSHA\r\n%b%b%b"
            % (11 + n, _bulk(self._sha), _bulk(n), _bulk(self._lease))
            for n in (2, 3, 4)
        )

    def combine(self, writes: list[FencedWrite], once: bool, bare: bool = False) -> ScriptCall:
        """The call carrying ``writes`` (``once``: records pushed only when not there;
        ``bare``: the payload only, the arguments ``()`` for a one- or two-write call — the
        batcher's first send, ``batch_entries.Combine``)."""
        if len(writes) == 2:
            pair = self._pair(writes[0], writes[1], once, bare)
            if pair is not None:
                return pair
        if len(writes) != 1:
            plain = self._plain(writes, once)
            if plain is not None:
                return plain
            text, keys, args = self._layout.build(writes, once)
            every: tuple[str | bytes | int, ...] = ("EVALSHA", self._sha, len(keys), *keys, *args)
            return text, every, encode_command(every)
        op, key, value, seen, marks = writes[0]
        if once and (op == "r" or op == "c"):
            op = op.upper()  # (the layout's push-if-absent, claim-unless-mine)
        data = value if type(value) is bytes else str(value).encode()
        name = key.encode()
        if seen:
            marker = seen.encode()
            extra = b"$%d\r\n%b\r\n" % (len(marker), marker)
            if marks:
                index = marks.encode()
                extra += b"$%d\r\n%b\r\n" % (len(index), index)
                head, at, indexed = self._heads[2], b"3", b"4"
            else:
                head, at, indexed = self._heads[1], b"3", b"0"
        elif marks:
            index = marks.encode()
            extra = b"$%d\r\n%b\r\n" % (len(index), index)
            head, at, indexed = self._heads[1], b"0", b"3"
        else:
            head, extra, at, indexed = self._heads[0], b"", b"0", b"0"
        constants, op_bytes = self._constants, op.encode()
        # head, the key, its seen marker and marker index (or nothing), the constant
        # arguments, op, value, marker index, marker index's index: the layout of a one-write
        # call (keys 1 lease, 2 key, then the marker and the index; ARGV epoch, TTL, indexed
        # TTL, op, key index 2, value, marker index, index index). A literal format: the
        # compiled build joins its parts in one allocation (``bytes %`` on a name parses the
        # format per call); a test holds it to the generic encoding.
        payload = (
            b"%b$%d\r\n%b\r\n%b%b$1\r\n%b\r\n$1\r\n2\r\n$%d\r\n%b\r\n$1\r\n%b\r\n$1\r\n%b\r\n"
        ) % (
            head, len(name), name, extra, constants, op_bytes, len(data), data, at, indexed
        )  # fmt: skip
        return FENCED_WRITES, () if bare else self._one(op, key, value, seen, marks), payload

    def _one(
        self, op: str, key: str, value: str | bytes, seen: str, marks: str
    ) -> tuple[str | bytes | int, ...]:
        """A one-write call's arguments (the layout ``combine`` encodes)."""
        sha, lease, epoch = self._sha, self._lease, self.epoch
        ttl, kept = self._ttls
        if seen:
            if marks:
                return (
                    "EVALSHA", sha, 4, lease, key, seen, marks, epoch, ttl, kept, op, 2, value, 3, 4
                )  # fmt: skip
            return ("EVALSHA", sha, 3, lease, key, seen, epoch, ttl, kept, op, 2, value, 3, 0)
        if marks:
            return ("EVALSHA", sha, 3, lease, key, marks, epoch, ttl, kept, op, 2, value, 0, 3)
        return ("EVALSHA", sha, 2, lease, key, epoch, ttl, kept, op, 2, value, 0, 0)

    def _plain(self, writes: list[FencedWrite], once: bool) -> ScriptCall | None:
        """Writes without markers (an acknowledged record's removal and the next record, of one
        session or two): encoded write by write, no ``pack_command``; None when one has a
        marker (the generic encoding then)."""
        keys: list[str] = [self._lease]
        index: dict[str, int] = {}
        args: list[str | bytes | int] = [self.epoch, self._ttls[0], self._ttls[1]]
        names = b""
        body = b""
        for op, key, value, seen, marks in writes:
            if seen or marks:
                return None
            at = index.get(key)
            if at is None:
                keys.append(key)
                at = index[key] = len(keys)
                names += self._bulk_of(key)
            if once and (op == "r" or op == "c"):
                op = op.upper()  # (the layout's push-if-absent, claim-unless-mine)
            data = value if type(value) is bytes else str(value).encode()
            field = _op_at(op, at) if at <= 3 else b"$1\r\n%b\r\n%b" % (op.encode(), _bulk(at))
            body += b"%b%b%b\r\n$1\r\n0\r\n$1\r\n0\r\n" % (field, _length(len(data)), data)
            args += (op, at, value, 0, 0)
        count = str(len(keys)).encode()
        payload = b"*%d\r\n$7\r\nEVALSHA\r\n%b$%d\r\n%b\r\n%b%b%b%b" % (
            3 + len(keys) + len(args),
            self._sha_bulk,
            len(count),
            count,
            self._lease_bulk,
            names,
            self._constants,
            body,
        )
        command: tuple[str | bytes | int, ...] = ("EVALSHA", self._sha, len(keys), *keys, *args)
        return FENCED_WRITES, command, payload

    def _pair(
        self, first: FencedWrite, second: FencedWrite, once: bool, bare: bool
    ) -> ScriptCall | None:
        """Two writes without markers (at low rates, an acknowledged record's removal and the
        next record): one ``bytes`` format, as a one-write call; None when one has a marker."""
        op, key, value, seen, marks = first
        op2, key2, value2, seen2, marks2 = second
        if seen or marks or seen2 or marks2:
            return None
        if once:
            if op == "r" or op == "c":
                op = op.upper()  # (the layout's push-if-absent, claim-unless-mine)
            if op2 == "r" or op2 == "c":
                op2 = op2.upper()
        data = value if type(value) is bytes else str(value).encode()
        data2 = value2 if type(value2) is bytes else str(value2).encode()
        # head, the key (or both), the constant arguments, then per write: op, key index,
        # value, no marker, no marker index (a literal format: see ``combine``; the keys'
        # bulk strings kept, the lengths' heads from a table)
        if key2 == key:
            head, names, at2 = self._pair_heads[0], b"", 2
        else:
            head, names, at2 = self._pair_heads[1], self._bulk_of(key2), 3
        payload = (
            b"%b%b%b%b%b%b%b\r\n$1\r\n0\r\n$1\r\n0\r\n%b%b%b\r\n$1\r\n0\r\n$1\r\n0\r\n"
        ) % (
            head, self._bulk_of(key), names, self._constants, _op_at(op, 2),
            _length(len(data)), data, _op_at(op2, at2), _length(len(data2)), data2,
        )  # fmt: skip
        if bare:
            return self._text, (), payload
        sha, lease, epoch = self._sha, self._lease, self.epoch
        ttl, kept = self._ttls
        command: tuple[str | bytes | int, ...]
        if key2 == key:
            command = (
                "EVALSHA", sha, 2, lease, key, epoch, ttl, kept,
                op, 2, value, 0, 0, op2, 2, value2, 0, 0,
            )  # fmt: skip
        else:
            command = (
                "EVALSHA", sha, 3, lease, key, key2, epoch, ttl, kept,
                op, 2, value, 0, 0, op2, 3, value2, 0, 0,
            )  # fmt: skip
        return self._text, command, payload

    def _bulk_of(self, key: str) -> bytes:
        """``key``'s bulk string (kept for ``_BULKS_MAX`` keys at most: all made again past
        that)."""
        bulk = self._bulks.get(key)
        if bulk is None:
            bulks = self._bulks
            if len(bulks) >= _BULKS_MAX:
                bulks.clear()
            bulk = bulks[key] = _bulk(key)
        return bulk

    def first_send(self, run: list[CoalescedItem]) -> ScriptCall:
        """``combine`` of the writes of ``run`` (the batcher's items: each write its third
        field) for their first send (``once`` False, ``bare``): the batcher's direct call
        (``redis_batcher._coalesced_entry``), no list of the writes made for a pair."""
        if len(run) == 2:
            items = cast("list[tuple[Any, ...]]", run)  # (no item unpacked whole, compiled)
            pair = self._pair(items[0][2], items[1][2], False, True)
            if pair is not None:
                return pair
        return self.combine([item[2] for item in run], False, True)


FENCED_COMBINE: Final = FencedCalls.combine
"""The ``combine`` of this run's writes, one object (the batcher calls a ``FencedCalls``
group's ``first_send`` directly when its items name it: ``redis_batcher._coalesced_entry``)."""

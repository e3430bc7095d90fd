"""The Lua script of a batch of fenced writes (:data:`FENCED_WRITES`) and its call builder.

The records, inbound QoS 2 ids, shared-group claims and acknowledged records' removals of one
batcher flush, in one call under one lease check (``xmq.store.fenced_calls`` sends them).
The index of all session scripts is :mod:`xmq.contract.session_scripts`.
"""

from __future__ import annotations

from xmq.contract.inbound_release_scripts import INBOUND_MARK_TTL_MS
from xmq.contract.keys import ClusterKeys
from xmq.contract.session_queue_scripts import (
    FORWARDED_SEEN_TTL_MS,
    PUSHED_LUA,
    WRITER_FENCE_LUA,
)

FENCED_WRITES = (
    """\
-- KEYS: 1 the writer's lease, then the queues, seen markers, marker indexes and qos2in sets
--       named below
-- ARGV: 1 writer epoch, 2 marker TTL in ms, 3 TTL in ms of an indexed marker (a ceiling: the
--       release of its inbound QoS 2 exchange shortens it), then 5 per write: op ('r' push a
--       record, 'R' push it only when not there — sent again after a lost connection —, 'i'
--       add an inbound QoS 2 id, 'c' claim a shared group's marker — the key — for the member
--       named by the value, 'C' the same sent again, 'l' remove an acknowledged record from
--       the queue — LREM count 1 —), key index, value, seen marker key index
--       ('0': none), index of the inbound message's marker index (session:qos2marks; '0':
--       none — the marker then lives ARGV[2])
"""
    + WRITER_FENCE_LUA
    + PUSHED_LUA
    + """\
local mine = KEYS[1] .. '@' .. ARGV[1]  -- a marker this run wrote
local out = {}
local n = 0
for i = 4, #ARGV, 5 do
  local key = KEYS[tonumber(ARGV[i + 1])]
  local value = ARGV[i + 2]
  local marker = tonumber(ARGV[i + 3])
  local marks = tonumber(ARGV[i + 4])
  n = n + 1
  local was = marker > 0 and redis.call('GET', KEYS[marker])
  if ARGV[i] == 'l' then
    out[n] = redis.call('LREM', key, 1, value)
  elseif ARGV[i] == 'i' then
    out[n] = redis.call('SADD', key, value)
  elseif ARGV[i] == 'c' or ARGV[i] == 'C' then
    local claim = mine .. '>' .. value
    local held = redis.call('GET', key)
    if held and (ARGV[i] ~= 'C' or held ~= claim) then
      out[n] = 0  -- the group has the message already (a member's record or claim)
    elseif marks > 0 then
      redis.call('SET', key, claim, 'PX', ARGV[3])
      redis.call('SADD', KEYS[marks], key)
      redis.call('PEXPIRE', KEYS[marks], ARGV[3])
      out[n] = 1
    else
      redis.call('SET', key, claim, 'PX', ARGV[2])
      out[n] = 1
    end
  elseif was and (ARGV[i] ~= 'R' or was ~= mine) then
    out[n] = 0  -- queued for the session already (by another node or path): not again
  else
    if ARGV[i] ~= 'R' or not redis.call('LPOS', key, value) then
      pushed(key, value)
    end
    if marks > 0 then
      redis.call('SET', KEYS[marker], mine, 'PX', ARGV[3])
      redis.call('SADD', KEYS[marks], KEYS[marker])
      redis.call('PEXPIRE', KEYS[marks], ARGV[3])
    elseif marker > 0 then
      redis.call('SET', KEYS[marker], mine, 'PX', ARGV[2])
    end
    out[n] = 1
  end
end
return out
"""
)
"""The records and inbound QoS 2 ids of one batch, in their order, in one call: the lease is
checked once and the whole batch is refused (``FENCED``, nothing written) when the writing run
holds none — the same fence as :data:`FENCED_RECORD` / :data:`FENCED_INBOUND_ID`, paid once per
batch. The reply has one element per write (``1`` for a record, ``SADD``'s reply for an id,
``1`` for a claim made and ``0`` for a group that has the message: ``core.shared_claims``,
``LREM``'s reply for a removal).

A removal (``'l'``) is a QoS 1 record the session acknowledged: it rides in the next batch's
call (``RedisSessionStore.acknowledged``) rather than in an ``LREM`` of its own; refused with
the batch (a run without a lease), the record stays and a resuming node sends it again — what
a kill -9 before the removal leaves, an extra QoS 1 delivery, never a loss.

A record with a seen marker is pushed only when the marker does not exist (``0``: the message
is queued for that session already — another node recorded it, or it came here twice); a
write sent again after a lost connection (``R``) finds its own marker (the run's lease key and
epoch) and is pushed only when not there."""

FencedWrite = tuple[str, str, bytes | str, str, str]
"""One write of :data:`FENCED_WRITES`: (``'r'`` a record, ``'i'`` an inbound id, ``'c'`` a
shared group's claim or ``'l'`` an acknowledged record's removal, its key — the session's queue,
its ``qos2in`` set, or the group's ``shared:seen`` marker —, the record, the packet id or the
member's client id, the record's ``session:seen`` / ``shared:seen`` marker key or ``''``, and
for a marker (or claim) of an inbound QoS 2 message id the message's marker index
``session:qos2marks:<message id>`` or ``''``: such a marker lives until its exchange is
released, not ``seen_ttl_ms``)."""


class FencedWrites:
    """Builds the :data:`FENCED_WRITES` calls of one writing run (node id, epoch): the lease key
    and the constant arguments are made once, a call costs one pass over its writes. Numbers go
    as ``int`` (the script reads them with ``tonumber``)."""

    __slots__ = ("epoch", "node_id", "_head", "_lease")

    def __init__(
        self,
        keys: ClusterKeys,
        writer: tuple[str, int],
        seen_ttl_ms: int = FORWARDED_SEEN_TTL_MS,
        mark_ttl_ms: int = INBOUND_MARK_TTL_MS,
    ) -> None:
        self.node_id, self.epoch = writer
        self._lease = keys.lease(writer[0])
        self._head: tuple[str | bytes | int, ...] = (writer[1], seen_ttl_ms, mark_ttl_ms)

    def build(
        self, writes: list[FencedWrite], once: bool = False
    ) -> tuple[str, tuple[str, ...], tuple[str | bytes | int, ...]]:
        """Script, keys and arguments of one call (``once``: records pushed only when not
        there, for a call cut off by a lost connection)."""
        names = [self._lease]
        args = list(self._head)
        push = "R" if once else "r"
        claim = "C" if once else "c"
        index: dict[str, int] = {}
        for op, key, value, seen, marks in writes:
            at = index.get(key)
            if at is None:
                names.append(key)
                at = index[key] = len(names)
            marker = 0
            if seen:
                names.append(seen)
                marker = len(names)
            indexed = 0
            if marks:
                names.append(marks)
                indexed = len(names)
            op = push if op == "r" else claim if op == "c" else op
            args += (op, at, value, marker, indexed)
        return FENCED_WRITES, tuple(names), tuple(args)


def fenced_writes(
    keys: ClusterKeys,
    writer: tuple[str, int],
    writes: list[FencedWrite],
    seen_ttl_ms: int = FORWARDED_SEEN_TTL_MS,
    once: bool = False,
    mark_ttl_ms: int = INBOUND_MARK_TTL_MS,
) -> tuple[str, tuple[str, ...], tuple[str | bytes | int, ...]]:
    """Script, keys and arguments of :data:`FENCED_WRITES` (``once``: records pushed only when
    not there, for a call cut off by a lost connection)."""
    return FencedWrites(keys, writer, seen_ttl_ms, mark_ttl_ms).build(writes, once)

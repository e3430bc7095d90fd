"""Lua scripts that write into a session's Redis queue, one record (or id) at a time.

* :data:`APPEND_IF_OWNER` — a publishing node appends to the queue of a session whose owner it
  believes dead, only while that owner's run has no lease.
* :data:`FENCED_RECORD`, :data:`FENCED_INBOUND_ID` — a record, an inbound QoS 2 packet id, of
  a session this node owns, written only while the writing run holds its lease.
* :data:`PUSHED_LUA`, :data:`WRITER_FENCE_LUA` — the Lua these scripts share (and
  :mod:`xmq.contract.fenced_batch_scripts`, the same writes for a whole batch).

The index of all session scripts is :mod:`xmq.contract.session_scripts`.
"""

from __future__ import annotations

from xmq.contract.inbound_release_scripts import INBOUND_MARK_TTL_MS, is_inbound_id
from xmq.contract.keys import ClusterKeys

FORWARDED_SEEN_TTL_MS = 60_000
"""Lifetime of a ``session:seen`` marker: longer than a forwarded message can take to be
replayed after its receiver died (the link closes at once on a kill; a replayed message waits at
most 2 x the lease TTL + 5 s for a new owner's claim or link, 25 s with the default TTL)."""

PUSHED_LUA = """\
local function pushed(queue, value)
  -- RPUSH; a queue it creates while its session is parked (the session's state has a TTL:
  -- its client disconnected) expires with the session, also when no node is left to end it
  if redis.call('RPUSH', queue, value) == 1 then
    local at = string.find(queue, '}:session:queue:', 1, true)
    if at then
      local ttl = redis.call('PTTL', string.sub(queue, 1, at + 1) .. 'session:state:'
                             .. string.sub(queue, at + 16))
      if ttl > 0 then
        redis.call('PEXPIRE', queue, ttl)
      end
    end
  end
end
"""
"""Lua: ``pushed(queue, value)``, the ``RPUSH`` of every script that queues a record. A session
that disconnects with an empty queue has no queue key to ``EXPIRE`` (``disconnected()``); the
first record after that creates it, and it takes the TTL of the session's state then."""

APPEND_IF_OWNER = (
    """\
-- KEYS: 1 owner, 2 queue, 3 (forwarded records only) seen marker of the record id, 4 (inbound
--       QoS 2 message ids only) the message's index of markers (session:qos2marks)
-- ARGV: 1 expected owner node id, 2 expected owner epoch, 3 record, 4 marker TTL in ms,
--       5 key prefix, 6 writer node id ('' no fencing), 7 writer epoch, 8 (with KEYS[4]) the
--       TTL in ms of an indexed marker (a ceiling: its exchange's release shortens it)
"""
    + PUSHED_LUA
    + """\
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  return {2, '', 0}  -- already queued for this session (and maybe acknowledged since)
end
local function live(node, epoch)
  local lease = redis.call('GET', ARGV[5] .. 'node:lease:' .. node)
  if not lease then
    return false
  end
  local ok, l = pcall(cjson.decode, lease)
  return ok and type(l) == 'table' and tonumber(l['epoch']) == tonumber(epoch)
end
if ARGV[6] ~= '' and not live(ARGV[6], ARGV[7]) then
  return {3, '', 0}  -- the writer's own run has no lease: fenced, nothing written
end
local raw = redis.call('GET', KEYS[1])
if not raw then
  return {1, '', 0}
end
local ok, owner = pcall(cjson.decode, raw)
if not ok or type(owner) ~= 'table' then
  return {1, '', 0}
end
if owner['node_id'] == ARGV[1] and tonumber(owner['epoch']) == tonumber(ARGV[2]) then
  if ARGV[6] ~= '' and ARGV[1] ~= ARGV[6] and live(ARGV[1], ARGV[2]) then
    -- the owner's run still holds its lease: it is alive, its messages go to it (a link
    -- dropped, or it is handing the session over), never to the queue of a live session
    return {1, ARGV[1], tonumber(ARGV[2])}
  end
  pushed(KEYS[2], ARGV[3])
  if KEYS[4] then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[8])
    redis.call('SADD', KEYS[4], KEYS[3])
    redis.call('PEXPIRE', KEYS[4], ARGV[8])
  elseif KEYS[3] then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
  end
  return {0, '', 0}
end
return {1, tostring(owner['node_id']), tonumber(owner['epoch']) or 0}
"""
)

WRITER_FENCE_LUA = """\
local lease = redis.call('GET', KEYS[1])
local ok, l = false, nil
if lease then
  ok, l = pcall(cjson.decode, lease)
end
if not ok or type(l) ~= 'table' or tonumber(l['epoch']) ~= tonumber(ARGV[1]) then
  return redis.error_reply('FENCED the writing run holds no lease (its epoch is not current)')
end
"""

"""Lua: the fence of a writing run, the first lines of a fenced script: ``KEYS[1]`` its
lease, ``ARGV[1]`` its epoch; the error reply ``FENCED`` when the lease is not that run's."""

FENCED_RECORD = (
    """\
-- KEYS: 1 the writer's lease, 2 session queue, 3 (forwarded records only) its seen marker
-- ARGV: 1 writer epoch, 2 record, 3 marker TTL in ms, 4 '1': push only when not there (sent
--       again after a lost connection: it may have been applied)
"""
    + WRITER_FENCE_LUA
    + PUSHED_LUA
    + """\
local mine = KEYS[1] .. '@' .. ARGV[1]
if KEYS[3] then
  local was = redis.call('GET', KEYS[3])
  if was and (ARGV[4] ~= '1' or was ~= mine) then
    return 0  -- queued for the session already (by another node or path): not again
  end
end
if ARGV[4] ~= '1' or not redis.call('LPOS', KEYS[2], ARGV[2]) then
  pushed(KEYS[2], ARGV[2])
end
if KEYS[3] then
  redis.call('SET', KEYS[3], mine, 'PX', ARGV[3])
end
return 1
"""
)
"""A persistent session's record, written only while the writing run holds its lease: a node
whose lease expired (Redis paused or unreachable past the TTL) must not make a message durable
for a session its clients have left meanwhile — they resend what was not acknowledged."""

FENCED_INBOUND_ID = (
    """\
-- KEYS: 1 the writer's lease, 2 session:qos2in; ARGV: 1 writer epoch, 2 packet id
"""
    + WRITER_FENCE_LUA
    + """\
return redis.call('SADD', KEYS[2], ARGV[2])
"""
)
"""An inbound QoS 2 packet id (its PUBREC waits for it), added only while the writing run holds
its lease. A stale run's id would make the publisher's re-sent PUBLISH look handled on its next
node (PUBREC without routing) although the message's records were fenced: lost."""


def append_if_owner(
    keys: ClusterKeys,
    client_id: str,
    owner: tuple[str, int],
    record: bytes,
    forward_id: str = "",
    seen_ttl_ms: int = FORWARDED_SEEN_TTL_MS,
    writer: tuple[str, int] | None = None,
    mark_ttl_ms: int = INBOUND_MARK_TTL_MS,
) -> tuple[str, tuple[str, ...], tuple[str | bytes, ...]]:
    """Script, keys and arguments of :data:`APPEND_IF_OWNER` (the record stays bytes).

    ``forward_id``: the id of a forwarded record (the one inside ``record``); the append is
    skipped when the session's marker of that id exists, and writes it otherwise (an inbound
    QoS 2 message id's marker lives ``mark_ttl_ms``, in the message's marker index, until its
    exchange is released; any other one ``seen_ttl_ms``).
    ``writer``: the fencing token (node id, epoch) of the appending node's run. With it the
    append is refused (``WRITER_FENCED``) unless that run holds its lease, and a session whose
    expected owner run still holds its lease (alive: a link dropped, or it is handing the
    session over) is answered ``MOVED`` to that same owner instead of being appended to.
    """
    writer_node, writer_epoch = writer if writer is not None else ("", 0)
    args: tuple[str | bytes, ...] = (
        owner[0],
        str(owner[1]),
        record,
        str(seen_ttl_ms),
        keys.prefix,
        writer_node,
        str(writer_epoch),
    )
    names = _queue_keys(keys, keys.session_owner(client_id), client_id, forward_id)
    if forward_id and is_inbound_id(forward_id):
        names = (*names, keys.inbound_marks(forward_id))
        args = (*args, str(mark_ttl_ms))
    return APPEND_IF_OWNER, names, args


def _queue_keys(keys: ClusterKeys, first: str, client_id: str, forward_id: str) -> tuple[str, ...]:
    """``first``, the session's queue, and the seen marker of a forwarded record's id."""
    queue = keys.session_queue(client_id)
    if forward_id:
        return (first, queue, keys.session_seen(client_id, forward_id))
    return (first, queue)


def fenced_record(
    keys: ClusterKeys,
    client_id: str,
    writer: tuple[str, int],
    record: bytes,
    forward_id: str = "",
    seen_ttl_ms: int = FORWARDED_SEEN_TTL_MS,
    once: bool = False,
) -> tuple[str, tuple[str, ...], tuple[str | bytes, ...]]:
    """Script, keys and arguments of :data:`FENCED_RECORD` (``once``: push-if-absent)."""
    args = (str(writer[1]), record, str(seen_ttl_ms), "1" if once else "0")
    return FENCED_RECORD, _queue_keys(keys, keys.lease(writer[0]), client_id, forward_id), args


def fenced_inbound_id(
    keys: ClusterKeys, client_id: str, writer: tuple[str, int], packet_id: int
) -> tuple[str, tuple[str, ...], tuple[str | bytes, ...]]:
    """Script, keys and arguments of :data:`FENCED_INBOUND_ID`."""
    return (
        FENCED_INBOUND_ID,
        (keys.lease(writer[0]), keys.session_qos2_inbound(client_id)),
        (str(writer[1]), str(packet_id)),
    )

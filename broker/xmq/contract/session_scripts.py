"""Lua scripts of session ownership and durable queues (text plus call builders).

* :data:`CLAIM_SESSION` — a CONNECT claims a client id cluster-wide in one round trip:
  compare-and-set of ``session:owner:<client id>``; a dead owner's claim (no lease, or a lease
  of another epoch) is taken directly; a live owner's is refused with its node id so the
  connecting node can ask it to hand the session over (and then claim with ``expected``).
  When asked, the reply carries the stored persistent session. The owner record and the
  stored state name the identity (user) that holds the session; a claim by another identity
  of a live or stored session is refused (``FOREIGN``) before anything changes, or (when the
  caller asks so) starts the session clean. The claim carries the caller's fencing token (node
  id + epoch): a run whose lease is not the current one (expired, or its node restarted since)
  is refused (``FENCED``) before anything changes.
* :data:`RELEASE_SESSION` — a session ended: delete its owner record (only when still ours) and
  its stored state; fenced the same way (a run without its lease changes nothing: ``2``).
* :data:`FENCED_RECORD`, :data:`FENCED_INBOUND_ID` — a record of a session this node owns
  (``RPUSH``, and its ``session:seen`` marker) and an inbound QoS 2 packet id (``SADD``),
  written only while the writing run holds its lease; else the error reply ``FENCED``.
* :data:`FENCED_WRITES` — the same two writes for a whole batch: one lease check, then each
  write in order (the durable store sends one call per batcher flush).
* :data:`RELEASE_INBOUND_ID` — an inbound QoS 2 packet id released: ``SREM`` and its release
  count (generation) moved on, once (compare-and-set); the markers of the released message
  (its ``session:qos2marks`` index, written by the records and claims of ``FENCED_WRITES``
  and ``APPEND_IF_OWNER``) get a short grace. ``RELEASE_SESSION`` and a claim that ends a
  stored session do the same for every open exchange of the session.
* :data:`APPEND_IF_OWNER` — a publishing node appends a message to the Redis queue of a session
  whose owner it believes dead, only while the owner record still names that owner *and* that
  owner's run has no lease; otherwise the reply names the current owner (the message then goes
  to it over the link). It carries the writer's fencing token (node id + epoch): a writer whose
  run holds no lease is refused.
  A forwarded message (record id ``<node>/<epoch>/f<n>``, assigned by the node that first
  forwarded it) is skipped when its ``session:seen`` marker exists: a node recorded it for the
  session already (the replay of a message whose PUBLISH_ACK died with its receiver).

All keys of a call share the cluster's hash tag; the scripts derive the lease and node-session
keys of other nodes from the key prefix (same slot).
"""

from __future__ import annotations

from xmq.contract.keys import ClusterKeys
from xmq.contract.scripts import ScriptCall

_RELEASE_MARKS = """\
local function release_marks(prefix, qos2in, state, qos2gen, grace)
  -- the markers of every open inbound QoS 2 exchange of the session get the short grace
  local incarnation = redis.call('HGET', state, 'incarnation')
  if not incarnation or incarnation == '' then
    return
  end
  for _, packet_id in ipairs(redis.call('SMEMBERS', qos2in)) do
    local generation = redis.call('HGET', qos2gen, packet_id) or '0'
    local index = prefix .. 'session:qos2marks:' .. incarnation .. '/q' .. packet_id .. '.'
                  .. generation
    for _, marker in ipairs(redis.call('SMEMBERS', index)) do
      redis.call('PEXPIRE', marker, grace)
    end
    redis.call('DEL', index)
  end
end
"""

CLAIM_SESSION = (
    """\
-- KEYS: 1 owner, 2 my node sessions, 3 orphaned, 4 subs, 5 queue, 6 inflight, 7 qos2in, 8 state,
--       9 qos2gen
-- ARGV: 1 my node id, 2 my epoch, 3 key prefix, 4 clean start, 5 durable, 6 expected owner
--       node ('' none), 7 expected owner epoch, 8 client id, 9 want state, 10 protocol
--       version, 11 expiry interval, 12 the connecting identity ('' no check), 13 '1' refuse
--       a session of another identity ('0': start it clean), 14 the incarnation a durable
--       session starting now takes (one it has already is kept), 15 the grace (ms) left to
--       the inbound markers of a session that ends here (clean start, or not durable now)
"""
    + _RELEASE_MARKS
    + """\
local function lease_of(node, epoch)  -- the lease of that run of the node, or nil
  local lease = redis.call('GET', ARGV[3] .. 'node:lease:' .. node)
  if lease then
    local ok, l = pcall(cjson.decode, lease)
    if ok and type(l) == 'table' and tonumber(l['epoch']) == tonumber(epoch) then
      return l
    end
  end
  return nil
end
if not lease_of(ARGV[1], ARGV[2]) then
  return {4}  -- fenced: the claiming run holds no lease (expired, or a newer run's)
end
local raw = redis.call('GET', KEYS[1])
local prev_node, prev_epoch, holder = '', 0, nil
if raw then
  local ok, owner = pcall(cjson.decode, raw)
  if ok and type(owner) == 'table' then
    prev_node = tostring(owner['node_id'] or '')
    prev_epoch = tonumber(owner['epoch']) or 0
    if type(owner['identity']) == 'string' then
      holder = owner['identity']
    end
  end
end
local my_epoch = tonumber(ARGV[2])
local mine = prev_node == ARGV[1] and prev_epoch == my_epoch
local clean = ARGV[4] == '1'
if ARGV[12] ~= '' then
  if holder == nil then
    holder = redis.call('HGET', KEYS[8], 'identity') or nil
  end
  if holder ~= nil and holder ~= ARGV[12] then
    -- another identity's session: alive (a leased owner) or stored (persistent) is never
    -- inherited; refused before any change, so its client is not disturbed
    local live = mine or (prev_node ~= '' and lease_of(prev_node, prev_epoch) ~= nil)
    if live or redis.call('EXISTS', KEYS[8]) == 1 then
      if ARGV[13] == '1' then
        return {3, prev_node, prev_epoch, ''}
      end
      clean = true
    end
  end
end
local identity = ''
if ARGV[12] ~= '' then
  identity = ',"identity":' .. cjson.encode(ARGV[12])
end
if prev_node ~= '' and not mine then
  local expected = prev_node == ARGV[6] and prev_epoch == tonumber(ARGV[7])
  if not expected then
    local l = lease_of(prev_node, prev_epoch)
    if l then
      return {2, prev_node, prev_epoch, tostring(l['address'] or '')}
    end
  end
  redis.call('SREM', ARGV[3] .. 'node:sessions:' .. prev_node, ARGV[8])
end
redis.call('SET', KEYS[1], '{"node_id":"' .. ARGV[1] .. '","epoch":' .. ARGV[2] .. identity .. '}')
if not raw then
  -- a client id nobody owns has no stored state: the cheap path of most connects
  if ARGV[5] == '1' then
    redis.call('SADD', KEYS[2], ARGV[8])
    redis.call('HSET', KEYS[8], 'protocol_version', ARGV[10], 'expiry_interval', ARGV[11],
               'incarnation', ARGV[14])
    if ARGV[12] ~= '' then
      redis.call('HSET', KEYS[8], 'identity', ARGV[12])
    end
  end
  return {0}
end
redis.call('SREM', KEYS[3], ARGV[8])
if clean then
  release_marks(ARGV[3], KEYS[7], KEYS[8], KEYS[9], ARGV[15])
  redis.call('DEL', KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
end
local reply = {0}
if not clean and ARGV[9] == '1' and redis.call('EXISTS', KEYS[8]) == 1 then
  reply = {1, prev_node, prev_epoch, '', redis.call('HGETALL', KEYS[4]),
           redis.call('LRANGE', KEYS[5], 0, -1), redis.call('HGETALL', KEYS[6]),
           redis.call('SMEMBERS', KEYS[7])}
end
if ARGV[5] == '1' then
  redis.call('SADD', KEYS[2], ARGV[8])
  redis.call('HSET', KEYS[8], 'protocol_version', ARGV[10], 'expiry_interval', ARGV[11])
  if ARGV[12] ~= '' then
    redis.call('HSET', KEYS[8], 'identity', ARGV[12])
  end
  redis.call('HSETNX', KEYS[8], 'incarnation', ARGV[14])
  redis.call('HDEL', KEYS[8], 'disconnected_at')
  for i = 4, 9 do
    redis.call('PERSIST', KEYS[i])  -- connected again: no expiry while the client is here
  end
else
  redis.call('SREM', KEYS[2], ARGV[8])
  if not clean then
    release_marks(ARGV[3], KEYS[7], KEYS[8], KEYS[9], ARGV[15])
    redis.call('DEL', KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
  end
end
if reply[1] == 1 then  -- what makes its inbound QoS 2 message ids (core.inbound_ids)
  reply[9] = redis.call('HGET', KEYS[8], 'incarnation') or ''
  reply[10] = redis.call('HGETALL', KEYS[9])
end
return reply
"""
)

RELEASE_SESSION = (
    """\
-- KEYS: 1 owner, 2 my node sessions, 3 subs, 4 queue, 5 inflight, 6 qos2in, 7 state, 8 qos2gen
-- ARGV: 1 my node id, 2 my epoch, 3 client id, 4 key prefix, 5 the grace (ms) left to the
--       markers of the session's open inbound QoS 2 exchanges
"""
    + _RELEASE_MARKS
    + """\
local lease = redis.call('GET', ARGV[4] .. 'node:lease:' .. ARGV[1])
local ok_l, l = false, nil
if lease then
  ok_l, l = pcall(cjson.decode, lease)
end
if not ok_l or type(l) ~= 'table' or tonumber(l['epoch']) ~= tonumber(ARGV[2]) then
  return 2  -- fenced: the releasing run holds no lease; the session is left as it is
end
local raw = redis.call('GET', KEYS[1])
if not raw then
  return 0
end
local ok, owner = pcall(cjson.decode, raw)
if not ok or type(owner) ~= 'table' or owner['node_id'] ~= ARGV[1]
    or tonumber(owner['epoch']) ~= tonumber(ARGV[2]) then
  return 0
end
release_marks(ARGV[4], KEYS[6], KEYS[7], KEYS[8], ARGV[5])
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('SREM', KEYS[2], ARGV[3])
return 1
"""
)

_QUEUE_EXPIRY = """\
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
    + _QUEUE_EXPIRY
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

_WRITER_FENCE = """\
local lease = redis.call('GET', KEYS[1])
local ok, l = false, nil
if lease then
  ok, l = pcall(cjson.decode, lease)
end
if not ok or type(l) ~= 'table' or tonumber(l['epoch']) ~= tonumber(ARGV[1]) then
  return redis.error_reply('FENCED the writing run holds no lease (its epoch is not current)')
end
"""

FENCED_RECORD = (
    """\
-- KEYS: 1 the writer's lease, 2 session queue, 3 (forwarded records only) its seen marker
-- ARGV: 1 writer epoch, 2 record, 3 marker TTL in ms, 4 '1': push only when not there (sent
--       again after a lost connection: it may have been applied)
"""
    + _WRITER_FENCE
    + _QUEUE_EXPIRY
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
    + _WRITER_FENCE
    + """\
return redis.call('SADD', KEYS[2], ARGV[2])
"""
)
"""An inbound QoS 2 packet id (its PUBREC waits for it), added only while the writing run holds
its lease. A stale run's id would make the publisher's re-sent PUBLISH look handled on its next
node (PUBREC without routing) although the message's records were fenced: lost."""

RELEASE_INBOUND_ID = """\
-- KEYS: 1 session:qos2in, 2 session:qos2gen, 3 (optional) the released message's index of
--       markers (session:qos2marks); ARGV: 1 packet id, 2 its generation released, 3 (with
--       KEYS[3]) the grace in ms left to its markers
if (tonumber(redis.call('HGET', KEYS[2], ARGV[1])) or 0) ~= tonumber(ARGV[2]) then
  return 0  -- released already (a retry, or a stale node's late write): nothing changes
end
redis.call('HSET', KEYS[2], ARGV[1], tonumber(ARGV[2]) + 1)
redis.call('SREM', KEYS[1], ARGV[1])
if KEYS[3] then  -- the exchange is closed: its markers need only outlive a replay now
  for _, marker in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    redis.call('PEXPIRE', marker, ARGV[3])
  end
  redis.call('DEL', KEYS[3])
end
return 1
"""
"""An inbound QoS 2 packet id released (PUBREL, or its PUBLISH refused): removed from
``session:qos2in`` and its release count (generation) moved on, once: only when the count is
still the one the releasing node read. The id's next message then has a new message id
(``core.inbound_ids``); a stale node's late release of an earlier generation changes nothing,
and a release retried after a lost connection neither. The markers written for the released
message (its ``session:qos2marks`` index) get a short grace (a forwarded frame's replay) and
the index goes, in the same script: no re-send of that message can come any more."""

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
    + _WRITER_FENCE
    + _QUEUE_EXPIRY
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

FORWARDED_SEEN_TTL_MS = 60_000
"""Lifetime of a ``session:seen`` marker: longer than a forwarded message can take to be
replayed after its receiver died (the link closes at once on a kill; a replayed message waits at
most 2 x the lease TTL + 5 s for a new owner's claim or link, 25 s with the default TTL)."""

INBOUND_MARK_TTL_MS = 86_400_000
"""Ceiling of an inbound QoS 2 message's markers (``session:seen`` / ``shared:seen``) and of
its index (``session:qos2marks``), 24 h: they live while the publisher's exchange is open and
get :func:`inbound_release_grace_ms` when it closes (``RELEASE_INBOUND_ID``, the session's
release or clean start). The ceiling only bounds what no release reaches: a publisher that
leaves an exchange open for longer than this (or whose session expired while its owner node
was dead) has a re-send taken for a new message again."""


def inbound_release_grace_ms(lease_ttl_s: float) -> int:
    """What an inbound QoS 2 message's markers keep after its exchange is released: a
    forwarded frame of it can still be replayed (2 x the lease TTL + 5 s at most)."""
    return int((2 * lease_ttl_s + 5) * 1000)


INBOUND_RELEASE_GRACE_MS = inbound_release_grace_ms(10.0)
"""The grace with the default lease TTL (10 s): 25 s."""


def _state_keys(keys: ClusterKeys, client_id: str) -> tuple[str, ...]:
    return (
        keys.session_subscriptions(client_id),
        keys.session_queue(client_id),
        keys.session_inflight(client_id),
        keys.session_qos2_inbound(client_id),
        keys.session_state(client_id),
        keys.session_qos2_generations(client_id),
    )


def claim_session(
    keys: ClusterKeys,
    client_id: str,
    node_id: str,
    epoch: int,
    *,
    clean_start: bool,
    durable: bool,
    want_state: bool,
    protocol_version: int,
    expiry_interval: int,
    expected: tuple[str, int] | None = None,
    identity: str = "",
    refuse_foreign: bool = True,
    incarnation: str = "",
    release_grace_ms: int = INBOUND_RELEASE_GRACE_MS,
) -> ScriptCall:
    """The :data:`CLAIM_SESSION` call of one CONNECT.

    ``identity``: who connects (stored with the session; ``''``: no identity check);
    ``refuse_foreign``: another identity's session is refused (else started clean);
    ``incarnation``: the one a durable session starting now (new, or started clean) takes;
    ``release_grace_ms``: what the markers of a stored session's open inbound QoS 2 exchanges
    keep when the claim ends that session (clean start, or not durable now).
    """
    exp_node, exp_epoch = expected if expected is not None else ("", 0)
    return ScriptCall(
        CLAIM_SESSION,
        (
            keys.session_owner(client_id),
            keys.node_sessions(node_id),
            keys.orphaned_sessions(),
            *_state_keys(keys, client_id),
        ),
        (
            node_id,
            str(epoch),
            keys.prefix,
            "1" if clean_start else "0",
            "1" if durable else "0",
            exp_node,
            str(exp_epoch),
            client_id,
            "1" if want_state else "0",
            str(protocol_version),
            str(expiry_interval),
            identity,
            "1" if refuse_foreign else "0",
            incarnation,
            str(release_grace_ms),
        ),
    )


def release_session(
    keys: ClusterKeys,
    client_id: str,
    node_id: str,
    epoch: int,
    release_grace_ms: int = INBOUND_RELEASE_GRACE_MS,
) -> ScriptCall:
    """The :data:`RELEASE_SESSION` call for a session that ended on ``node_id``
    (``release_grace_ms``: what the markers of its open inbound QoS 2 exchanges keep)."""
    return ScriptCall(
        RELEASE_SESSION,
        (
            keys.session_owner(client_id),
            keys.node_sessions(node_id),
            *_state_keys(keys, client_id),
        ),
        (node_id, str(epoch), client_id, keys.prefix, str(release_grace_ms)),
    )


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


def release_inbound_id(
    keys: ClusterKeys,
    client_id: str,
    packet_id: int,
    generation: int,
    message_id: str = "",
    grace_ms: int = INBOUND_RELEASE_GRACE_MS,
) -> tuple[str, tuple[str, ...], tuple[str | bytes, ...]]:
    """Script, keys and arguments of :data:`RELEASE_INBOUND_ID` (``generation``: the times
    the id was released before this release; ``message_id``: the released message's id,
    whose markers then keep ``grace_ms``; ``''``: none to shorten)."""
    names = (keys.session_qos2_inbound(client_id), keys.session_qos2_generations(client_id))
    if not message_id:
        return RELEASE_INBOUND_ID, names, (str(packet_id), str(generation))
    return (
        RELEASE_INBOUND_ID,
        (*names, keys.inbound_marks(message_id)),
        (str(packet_id), str(generation), str(grace_ms)),
    )


def is_inbound_id(record_id: str) -> bool:
    """True for an inbound QoS 2 message id (``<incarnation>/q<packet id>.<generation>``),
    False for a node's forward id (``<node>/<epoch>/f<n>``) or a record counter."""
    return record_id.rpartition("/")[2][:1] == "q"


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

"""Lua scripts of session ownership: a CONNECT's claim of a client id, a session's release.

* :data:`CLAIM_SESSION` — compare-and-set of ``session:owner:<client id>`` in one round trip,
  fenced by the caller's lease; a live owner is named, another identity's session refused.
* :data:`RELEASE_SESSION` — a session ended: its owner record (only when still ours) and its
  stored state deleted; fenced the same way.

The index of all session scripts, with what each one does, is :mod:`xmq.contract.session_scripts`.
"""

from __future__ import annotations

from xmq.contract.inbound_release_scripts import INBOUND_RELEASE_GRACE_MS
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

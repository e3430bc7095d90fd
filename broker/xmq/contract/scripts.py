"""Lua scripts of the contract, as text (the caller runs them with ``EVALSHA``/``EVAL``).

The scripts touch several keys of one cluster atomically; all of them share the cluster's hash
tag (see :mod:`xmq.contract.keys`), so they also run on Redis Cluster.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from xmq.contract.keys import ClusterKeys


class CleanupOutcome(enum.IntEnum):
    """First element of :data:`RELEASE_DEAD_NODE`'s reply."""

    LEASE_DELETED = 1
    """The lease matched the dead pod: deleted, sessions orphaned, member removed."""
    NO_LEASE = 0
    """No lease was left (expired or already cleared): sessions orphaned, member removed."""
    LEASE_IS_OTHER = -1
    """The lease belongs to another pod UID or epoch (a live replacement): nothing touched."""
    NEWER_RUN = -2
    """No lease, but the node's epoch counter has moved past the dead run: nothing touched."""


RELEASE_DEAD_NODE = """\
-- KEYS: 1 lease, 2 node sessions, 3 orphaned sessions, 4 members, 5 node epoch counter
-- ARGV: 1 node id, 2 pod uid of the dead pod, 3 epoch of the dead run or '' for any
-- Returns {outcome, sessions moved to the orphaned set}.
local raw = redis.call('GET', KEYS[1])
local epoch = tonumber(ARGV[3])
if raw then
  local ok, lease = pcall(cjson.decode, raw)
  if not ok or type(lease) ~= 'table' then
    return redis.error_reply('XMQ malformed lease at ' .. KEYS[1])
  end
  if lease['pod_uid'] ~= ARGV[2] then
    return {-1, 0}
  end
  if epoch ~= nil and tonumber(lease['epoch']) ~= epoch then
    return {-1, 0}
  end
  redis.call('DEL', KEYS[1])
elseif epoch ~= nil then
  local current = tonumber(redis.call('GET', KEYS[5]) or '0')
  if current > epoch then
    return {-2, 0}
  end
end
local outcome = 0
if raw then
  outcome = 1
end
local moved = 0
local sessions = redis.call('SMEMBERS', KEYS[2])
for start = 1, #sessions, 1000 do
  local stop = math.min(start + 999, #sessions)
  moved = moved + redis.call('SADD', KEYS[3], unpack(sessions, start, stop))
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[4], ARGV[1])
return {outcome, moved}
"""
"""Compare-and-delete a dead node's lease, orphaning the sessions it owned (atomic).

The operator runs it when a pod is dead (deleted, container restarted, Node deleted or
tainted out-of-service). The lease is deleted only when its ``pod_uid`` (and ``epoch``, when
given) match the dead pod; a lease written by a live replacement is never touched.
"""


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """A script with its keys and arguments, ready for ``EVAL script len(keys) *keys *args``."""

    script: str
    keys: tuple[str, ...]
    args: tuple[str, ...]


def release_dead_node(
    keys: ClusterKeys, node_id: str, pod_uid: str, epoch: int | None = None
) -> ScriptCall:
    """The :data:`RELEASE_DEAD_NODE` call for node ``node_id`` of the dead pod ``pod_uid``."""
    if not pod_uid:
        raise ValueError("the dead pod's UID is required")
    if epoch is not None and epoch < 1:
        raise ValueError(f"invalid epoch {epoch}")
    return ScriptCall(
        script=RELEASE_DEAD_NODE,
        keys=(
            keys.lease(node_id),
            keys.node_sessions(node_id),
            keys.orphaned_sessions(),
            keys.members(),
            keys.node_epoch(node_id),
        ),
        args=(node_id, pod_uid, "" if epoch is None else str(epoch)),
    )


@dataclass(frozen=True, slots=True)
class CleanupResult:
    """Decoded reply of :data:`RELEASE_DEAD_NODE`."""

    outcome: CleanupOutcome
    sessions_orphaned: int

    @classmethod
    def from_reply(cls, reply: object) -> CleanupResult:
        """Decode the ``{outcome, moved}`` array Redis returns."""
        if not isinstance(reply, list | tuple) or len(reply) != 2:
            raise ValueError(f"unexpected reply {reply!r}")
        outcome, moved = reply
        return cls(CleanupOutcome(int(outcome)), int(moved))

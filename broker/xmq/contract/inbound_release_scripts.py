"""Lua script and lifetimes of an inbound QoS 2 exchange's markers, and its release.

* :data:`RELEASE_INBOUND_ID` — an inbound QoS 2 packet id released: ``SREM`` and its release
  count (generation) moved on, once (compare-and-set); the markers of the released message
  (its ``session:qos2marks`` index) get a short grace.
* :data:`INBOUND_MARK_TTL_MS`, :func:`inbound_release_grace_ms` — how long those markers live
  while the exchange is open, and after it closes; :func:`is_inbound_id` tells their ids apart.

The index of all session scripts is :mod:`xmq.contract.session_scripts`.
"""

from __future__ import annotations

from xmq.contract.keys import ClusterKeys

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

"""The Lua script that records a retained-message change (set or tombstone) with a revision.

Keys (all in the cluster's hash slot): ``retained:rev`` (counter), ``retained:msg:<topic>``
(JSON :class:`~xmq.contract.records.RetainedMessage`), ``retained:index`` (sorted set topic ->
revision). The script takes the next revision from the counter, so the order of revisions is
the order in which Redis applied the changes, and the stored record is always the newest one.
"""

from __future__ import annotations

RETAINED_TOMBSTONE_TTL_MS = 24 * 3600 * 1000
"""How long a tombstone (a cleared retained message) stays in Redis."""

SET_RETAINED = """\
-- KEYS: 1 revision counter, 2 message key, 3 index
-- ARGV: 1 record JSON (revision filled in here), 2 TTL in ms ('0': none), 3 topic
-- Returns the revision of this change.
local rev = redis.call('INCR', KEYS[1])
local record = cjson.decode(ARGV[1])
record['revision'] = rev
local raw = cjson.encode(record)
local ttl = tonumber(ARGV[2])
if ttl and ttl > 0 then
  redis.call('SET', KEYS[2], raw, 'PX', ttl)
else
  redis.call('SET', KEYS[2], raw)
end
redis.call('ZADD', KEYS[3], rev, ARGV[3])
return rev
"""

"""Lua scripts of session ownership and durable queues: the index of their families.

The scripts (text plus call builders) live by what they are for: session_claim_scripts (a
CONNECT's claim, a session's release), session_queue_scripts (one record or id written into a
session's queue), fenced_batch_scripts (a batch of those writes in one call) and
inbound_release_scripts (an inbound QoS 2 exchange's release and its markers' lifetimes); this
module names them all, so ``from xmq.contract.session_scripts import ...`` finds each.

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

from xmq.contract.fenced_batch_scripts import (
    FENCED_WRITES,
    FencedWrite,
    FencedWrites,
    fenced_writes,
)
from xmq.contract.inbound_release_scripts import (
    INBOUND_MARK_TTL_MS,
    INBOUND_RELEASE_GRACE_MS,
    RELEASE_INBOUND_ID,
    inbound_release_grace_ms,
    is_inbound_id,
    release_inbound_id,
)
from xmq.contract.session_claim_scripts import (
    CLAIM_SESSION,
    RELEASE_SESSION,
    claim_session,
    release_session,
)
from xmq.contract.session_queue_scripts import (
    APPEND_IF_OWNER,
    FENCED_INBOUND_ID,
    FENCED_RECORD,
    FORWARDED_SEEN_TTL_MS,
    append_if_owner,
    fenced_inbound_id,
    fenced_record,
)

__all__ = [
    "APPEND_IF_OWNER",
    "CLAIM_SESSION",
    "FENCED_INBOUND_ID",
    "FENCED_RECORD",
    "FENCED_WRITES",
    "FORWARDED_SEEN_TTL_MS",
    "FencedWrite",
    "FencedWrites",
    "INBOUND_MARK_TTL_MS",
    "INBOUND_RELEASE_GRACE_MS",
    "RELEASE_INBOUND_ID",
    "RELEASE_SESSION",
    "append_if_owner",
    "claim_session",
    "fenced_inbound_id",
    "fenced_record",
    "fenced_writes",
    "inbound_release_grace_ms",
    "is_inbound_id",
    "release_inbound_id",
    "release_session",
]

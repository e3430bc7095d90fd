"""The node's caps on what it holds: sessions, persistent sessions, retained messages.

``session_cap_hit`` (a CONNECT's login) and ``retained_cap_hit`` (a retained PUBLISH) say
which cap a request would pass (``settings.max_sessions``, ``max_persistent_sessions``,
``max_retained_messages``, ``max_retained_bytes``); ``set_expiry`` changes a session's expiry
interval and keeps ``Broker.persistent_sessions``, the count the persistent cap reads;
``set_store`` gives a session its durable store (or takes it) and keeps
``Broker.durable_sessions``, the count of sessions whose records are written.
Compiled (``xmq.native_build``): asked once per connect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.core.message import Message
from xmq.core.session import Session
from xmq.protocol.connect_terms import ConnectTerms

if TYPE_CHECKING:
    from xmq.core.broker import Broker
    from xmq.core.cluster_ports import DurableStore


def session_cap_hit(broker: Broker, terms: ConnectTerms) -> str | None:
    """The session cap (``limits.max_sessions`` / ``max_persistent_sessions``) a CONNECT
    with these terms would pass, or None. Resuming a session held here passes neither,
    unless it turns a clean session into a persistent one at the persistent cap."""
    settings = broker.settings
    existing = broker.sessions.get(terms.client_id)
    if existing is None and settings.max_sessions and len(broker.sessions) >= settings.max_sessions:
        return "sessions"
    persistent_cap = settings.max_persistent_sessions
    if (
        persistent_cap
        and terms.session_expiry_s
        and (existing is None or not existing.expiry_s)
        and broker.persistent_sessions >= persistent_cap
    ):
        return "persistent_sessions"
    return None


def set_expiry(broker: Broker, session: Session, expiry_s: int) -> None:
    """Set a session's expiry interval, keeping the persistent-session count."""
    if bool(expiry_s) != bool(session.expiry_s):
        broker.persistent_sessions += 1 if expiry_s else -1
    session.expiry_s = expiry_s


def set_store(broker: Broker, session: Session, store: DurableStore | None) -> None:
    """Give ``session`` its durable store (a persistent session in a cluster), or take it
    (None), keeping ``Broker.durable_sessions`` exact: every ``Session.store`` on the node is
    set here. While that count is 0 no record of a session is written on this node, so
    nothing routed here needs a durable context (``Broker.publish_from_peer``) and a local
    publish holds its PUBACK only for what other nodes and Redis keep
    (``publish_flow.route_publish``). A message fanning out over later turns
    (``core.fanout_slices``) keeps the context it started with: none of its sessions gains a
    store meanwhile (in a cluster a session without one has expiry 0, ends with its
    connection, and a DISCONNECT may not raise it: a store only comes with a new ``Session``)."""
    if (store is None) != (session.store is None):
        broker.durable_sessions += 1 if store is not None else -1
    session.store = store


def retained_cap_hit(broker: Broker, topic: str, message: Message) -> str | None:
    """The retained cap (count or bytes) storing `message` on `topic` would pass, or None.

    In a cluster every node holds the cluster's retained set, so each node checks the
    messages it accepts against the whole set; messages other nodes accepted are stored
    without a check (the copies must agree).
    """
    settings = broker.settings
    retained = broker.retained
    if (
        settings.max_retained_messages
        and len(retained) >= settings.max_retained_messages
        and topic not in retained
    ):
        return "retained_messages"
    if (
        settings.max_retained_bytes
        and retained.bytes + retained.cost_of_set(topic, message) > settings.max_retained_bytes
    ):
        return "retained_bytes"
    return None

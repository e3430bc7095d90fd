"""SUBSCRIBE and UNSUBSCRIBE: validation, limits, ACL, retained-message delivery.

With ``persistence.max_queued_writes: 0`` (``Broker.acks`` set) the SUBACK of a persistent
session's SUBSCRIBE waits for the subscriptions' records in Redis (``HeldSuback``), as a
publisher's PUBACK waits for its message's: a client that has its SUBACK has its subscriptions
where a node that starts, or takes the session over, reads them. Before, a node paused or
killed between the SUBACK and its ``HSET`` left a subscription the client was told it had,
which another node did not know: a message published there got PUBACK 0x10 and was lost.
The subscription routes at once on this node; only the SUBACK (and the retained messages after
it) wait. A record given up (Redis down past the retry time, or this run fenced) closes the
connection with 0x80: the client, not told it is subscribed, subscribes again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xmq.codec.packets import MQTT_5, Subscribe, SubscriptionRequest, Unsuback, Unsubscribe
from xmq.codec.reason_codes import ReasonCode, suback_v311_code
from xmq.codec.writer import suback_bytes
from xmq.core.retained_feed import RetainedFeed
from xmq.core.session import Session, Subscription
from xmq.routing.topics import TopicError, has_wildcard, parse_shared

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

_NO_IDS: tuple[int, ...] = ()


class HeldSuback:
    """A SUBACK waiting for the durable records of the subscriptions its SUBSCRIBE made (a
    ``DurableHold``): each record takes a ``hold()``, gives it back when written; the
    SUBSCRIBE's handling holds one more until it has the SUBACK (``answer``)."""

    __slots__ = ("_after", "_conn", "_data", "_failed", "_holds")

    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn
        self._holds = 1  # the SUBSCRIBE's own, until ``answer``
        self._failed = False
        self._data = b""
        self._after: Callable[[], None] | None = None

    def answer(self, data: bytes, after: Callable[[], None] | None) -> None:
        """The SUBACK (``data``) and what follows it (the retained messages owed): sent when
        every record is written."""
        self._data = data
        self._after = after
        self.release()

    def hold(self) -> None:
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        if self._holds:
            return
        conn = self._conn
        if self._failed:
            conn.close_with(ReasonCode.UNSPECIFIED_ERROR, "a subscription was not recorded")
            return
        conn.link.write(self._data)  # (nothing when the connection went meanwhile)
        if self._after is not None:
            self._after()

    def fail(self) -> None:
        self._failed = True
        self.release()

    def undelivered(self, reason: int) -> None:
        self.release()


class _SubscribeRefused(Exception):  # noqa: N818 - internal control flow
    def __init__(self, reason_code: int) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code


def handle_subscribe(conn: ClientConnection, packet: Subscribe) -> None:
    """Check and apply every filter, answer SUBACK, then owe the retained messages.

    A filter listed more than once in one SUBSCRIBE is applied once, as its last occurrence
    (MQTT 5.0 §3.8.4: a later identical filter replaces the earlier subscription); every
    occurrence is still checked and gets its own reason code. Retained messages go out through
    the connection's ``RetainedFeed``, a slice per loop turn.
    """
    broker = conn.broker
    limits = broker.settings.limits
    session = conn.session
    assert session is not None
    props = packet.properties
    identifier: int | None = None
    if props is not None and props.subscription_identifiers:
        if not limits.subscription_ids_available:
            conn.close_with(ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED)
            return
        identifier = props.subscription_identifiers[0]
    requests = packet.subscriptions
    last: dict[str, int] = {}
    if len(requests) > 1:
        last = {request.topic_filter: index for index, request in enumerate(requests)}
    codes: list[int] = []
    owed: list[tuple[Subscription, str]] = []
    held = HeldSuback(conn) if broker.acks is not None and session.store is not None else None
    for index, request in enumerate(requests):
        apply = not last or last[request.topic_filter] == index
        try:
            checked = _check_one(conn, session, request)
            if apply:
                sub, key, wants_retained = _apply_one(
                    conn, session, request, checked, identifier, held
                )
                if wants_retained:
                    owed.append((sub, key))
        except _SubscribeRefused as refused:
            if refused.reason_code == ReasonCode.PROTOCOL_ERROR:
                conn.close_with(ReasonCode.PROTOCOL_ERROR, "no local on a shared subscription")
                return
            codes.append(refused.reason_code)
            refusals = broker.stats.subscribe_refused_by_reason
            refusals[refused.reason_code] = refusals.get(refused.reason_code, 0) + 1
            continue
        codes.append(checked[2])
    if conn.version != MQTT_5:
        codes = [suback_v311_code(code) for code in codes]
    suback = suback_bytes(packet.packet_id, codes, conn.version)
    feed = _retained_feed(conn, owed, identifier) if owed and len(broker.retained) else None
    if held is not None:
        held.answer(suback, feed.start if feed is not None else None)
        return
    conn.link.write(suback)
    if feed is not None:
        feed.start()


def _retained_feed(
    conn: ClientConnection, owed: list[tuple[Subscription, str]], identifier: int | None
) -> RetainedFeed:
    """The connection's retained feed with the messages ``owed`` added (as of now: later
    retained messages reach the subscriptions live), to ``start`` after the SUBACK."""
    feed = conn.retained_feed
    if feed is None:
        feed = conn.retained_feed = RetainedFeed(conn)
    ids = (identifier,) if identifier else _NO_IDS
    retained = conn.broker.retained
    now = retained.revision
    for sub, key in owed:
        feed.add(sub, key, retained.walk(sub.topic_filter, now), ids)
    return feed


_Checked = tuple[str | None, str, int]
"""(share group, topic filter, granted QoS) of a subscription request that passed its checks."""


def _check_one(conn: ClientConnection, session: Session, request: SubscriptionRequest) -> _Checked:
    broker = conn.broker
    settings = broker.settings
    limits = settings.limits
    try:
        group, topic_filter = parse_shared(
            request.topic_filter, settings.max_topic_length, settings.max_topic_levels
        )
    except TopicError as error:
        raise _SubscribeRefused(error.reason_code) from error
    if group is not None:
        if not limits.shared_available:
            raise _SubscribeRefused(ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
        if request.no_local:
            raise _SubscribeRefused(ReasonCode.PROTOCOL_ERROR)
    if not limits.wildcard_available and has_wildcard(topic_filter):
        raise _SubscribeRefused(ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED)
    maximum = settings.max_subscriptions_per_client
    if (
        maximum
        and request.topic_filter not in session.subscriptions
        and len(session.subscriptions) >= maximum
    ):
        raise _SubscribeRefused(ReasonCode.QUOTA_EXCEEDED)
    if not conn.acl.can_subscribe(request.topic_filter, request.qos):
        raise _SubscribeRefused(ReasonCode.NOT_AUTHORIZED)
    return group, topic_filter, min(request.qos, limits.maximum_qos)


def _apply_one(
    conn: ClientConnection,
    session: Session,
    request: SubscriptionRequest,
    checked: _Checked,
    identifier: int | None,
    held: HeldSuback | None,
) -> tuple[Subscription, str, bool]:
    """Subscribe; return (subscription, its key in the session, whether retained are owed)."""
    group, topic_filter, granted = checked
    sub = Subscription(
        session,
        topic_filter,
        granted,
        request.no_local,
        request.retain_as_published,
        request.retain_handling,
        identifier,
        group,
    )
    is_new = conn.broker.subscribe(session, sub, held)
    handling = request.retain_handling
    wants = group is None and (handling == 0 or (handling == 1 and is_new))
    return sub, request.topic_filter, wants


def handle_unsubscribe(conn: ClientConnection, packet: Unsubscribe) -> None:
    broker = conn.broker
    session = conn.session
    assert session is not None
    codes: list[int] = []
    for topic_filter in packet.topic_filters:
        try:
            parse_shared(topic_filter)
        except TopicError:
            codes.append(ReasonCode.TOPIC_FILTER_INVALID)
            continue
        removed = broker.unsubscribe(session, topic_filter)
        codes.append(ReasonCode.SUCCESS if removed else ReasonCode.NO_SUBSCRIPTION_EXISTED)
    conn.write_packet(Unsuback(packet.packet_id, codes))

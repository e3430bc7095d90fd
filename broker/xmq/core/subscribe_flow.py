"""SUBSCRIBE and UNSUBSCRIBE: validation, limits, ACL, retained-message delivery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.codec.packets import MQTT_5, Subscribe, SubscriptionRequest, Unsuback, Unsubscribe
from xmq.codec.reason_codes import ReasonCode, suback_v311_code
from xmq.codec.writer import suback_bytes
from xmq.core.message import Message
from xmq.core.session import Session, Subscription
from xmq.routing.topics import TopicError, has_wildcard, parse_shared

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

_NO_IDS: tuple[int, ...] = ()


class _SubscribeRefused(Exception):  # noqa: N818 - internal control flow
    def __init__(self, reason_code: int) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code


def handle_subscribe(conn: ClientConnection, packet: Subscribe) -> None:
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
    codes: list[int] = []
    retained: list[tuple[Subscription, list[Message]]] = []
    for request in packet.subscriptions:
        try:
            sub, messages = _subscribe_one(conn, session, request, identifier)
        except _SubscribeRefused as refused:
            if refused.reason_code == ReasonCode.PROTOCOL_ERROR:
                conn.close_with(ReasonCode.PROTOCOL_ERROR, "no local on a shared subscription")
                return
            codes.append(refused.reason_code)
            refusals = broker.stats.subscribe_refused_by_reason
            refusals[refused.reason_code] = refusals.get(refused.reason_code, 0) + 1
            continue
        codes.append(sub.qos)
        if messages:
            retained.append((sub, messages))
    if conn.version != MQTT_5:
        codes = [suback_v311_code(code) for code in codes]
    conn.link.write(suback_bytes(packet.packet_id, codes, conn.version))
    if retained:
        now = broker.now()
        ids = (identifier,) if identifier else _NO_IDS
        for sub, messages in retained:
            for message in messages:
                if sub.no_local and message.origin == session.client_id:
                    continue
                qos = message.qos if message.qos < sub.qos else sub.qos
                session.deliver(message, qos, True, ids, None, now)


def _subscribe_one(
    conn: ClientConnection,
    session: Session,
    request: SubscriptionRequest,
    identifier: int | None,
) -> tuple[Subscription, list[Message]]:
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
    granted = min(request.qos, limits.maximum_qos)
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
    is_new = broker.subscribe(session, sub)
    messages: list[Message] = []
    handling = request.retain_handling
    if group is None and (handling == 0 or (handling == 1 and is_new)):
        messages = broker.retained_for(topic_filter)
    return sub, messages


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

"""Inbound PUBLISH and the acknowledgement packets of both QoS flows."""

from __future__ import annotations

from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Final

from xmq.codec.errors import ProtocolError
from xmq.codec.packets import MQTT_5, Puback, Pubcomp, Publish, Pubrec, Pubrel
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import ReasonCode
from xmq.codec.writer import puback_bytes, pubcomp_bytes, pubrec_bytes, pubrel_bytes
from xmq.core.auth_ports import RESERVED_TOPIC_PREFIX, AllowAll
from xmq.core.cluster_ports import DurableContext
from xmq.core.held_acks import AckGate, HeldAck
from xmq.core.message import EncodedPublish, Message, routed_message
from xmq.core.node_caps import retained_cap_hit
from xmq.protocol.outbound_qos import NOT_FOUND, VIOLATION
from xmq.routing.topics import TopicError, has_wildcard, validate_topic_name

if TYPE_CHECKING:
    from xmq.core.broker import Broker
    from xmq.core.connection import ClientConnection
    from xmq.core.session import Session
    from xmq.core.stats import BrokerStats

_NOT_FOUND = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
_QUOTA = ReasonCode.QUOTA_EXCEEDED

_ALLOW_ALL: Final = AllowAll
"""The default ACL's class, compiled a C static: ``AllowAll`` itself is a name imported from
an interpreted module, looked up in this module's dict at each PUBLISH (~140 instructions)."""
_SAMPLE_MASK: Final = 15
"""The routing-latency histogram times one PUBLISH in 16 (the 1st, 17th, ...): two clock
reads and a bucket search cost a tenth of routing a point-to-point message."""


def on_publish(conn: ClientConnection, packet: Publish) -> None:
    """A decoded PUBLISH: properties and topic aliases first, then ``route_publish``."""
    topic = packet.topic
    props = packet.properties
    try:
        if props is not None:
            if props.topic_alias is not None or not topic:
                topic = conn.inbound_aliases().resolve(topic, props.topic_alias)
            if props.subscription_identifiers:
                conn.close_with(ReasonCode.PROTOCOL_ERROR, "subscription identifier in PUBLISH")
                return
            response_topic = props.response_topic
            if response_topic is not None and (
                not response_topic or has_wildcard(response_topic)
            ):  # a topic name: no wildcards (MQTT-3.3.2-14), one character at least (4.7.3-1)
                conn.close_with(ReasonCode.PROTOCOL_ERROR, "response topic is no topic name")
                return
            if props.payload_format_indicator == 1:
                try:
                    packet.payload.decode("utf-8")
                except UnicodeDecodeError:
                    conn.broker.stats.messages_received += 1
                    _refuse_publish(
                        conn, packet.qos, packet.packet_id, ReasonCode.PAYLOAD_FORMAT_INVALID
                    )
                    return
        elif not topic:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "empty topic name without an alias")
            return
    except ProtocolError as error:
        conn.close_with(error.reason_code, str(error))
        return
    route_publish(conn, topic, packet.qos, packet.retain, packet.payload, props, packet.packet_id)


def route_publish(
    conn: ClientConnection,
    topic: str,
    qos: int,
    retain: bool,
    payload: bytes,
    props: Properties | None,
    packet_id: int,
    wire: EncodedPublish | None = None,
) -> None:
    """Check, route and acknowledge one inbound PUBLISH (topic alias already resolved).

    Also the whole of a plain PUBLISH recognised by the adapter without decoding
    (``codec.plain_publish``: QoS 0/1, no retain, no properties); its ``wire`` bytes are
    forwarded as they came to subscribers of the same protocol version and QoS.
    """
    broker = conn.broker
    stats = broker.stats
    received = stats.messages_received + 1
    stats.messages_received = received
    stats.count_received(qos, len(payload))
    limits = broker.limits
    if qos > limits.maximum_qos:
        conn.close_with(ReasonCode.QOS_NOT_SUPPORTED, "QoS not supported")
        return
    if retain and not limits.retain_available:
        conn.close_with(ReasonCode.RETAIN_NOT_SUPPORTED, "retain not supported")
        return
    if topic not in broker.plans.entries:  # routed before means validated before
        try:
            validate_topic_name(
                topic, broker.settings.max_topic_length, broker.settings.max_topic_levels
            )
        except TopicError as error:
            conn.close_with(error.reason_code, str(error))
            return
    session = conn.session
    assert session is not None
    if qos == 2:
        if packet_id in session.inbound_qos2:  # a re-sent QoS 2 PUBLISH
            gate = broker.acks
            if gate is not None and gate.resent(conn, session.client_id, packet_id):
                return  # its PUBREC is still held: it goes to this connection
            message_ids = session.inbound_ids
            if gate is None or message_ids is None or not message_ids.route_again(packet_id):
                conn.link.write(pubrec_bytes(packet_id, 0, conn.version))
                return
            # received by another node (a claim read its id back): routed again, under the
            # same message id, which each destination session's record ignores if it has it
            # (core.inbound_ids) — its records may have been refused while its id was written
        elif len(session.inbound_qos2) >= limits.receive_maximum:
            conn.close_with(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded")
            return
    acl = conn.acl
    if type(acl) is _ALLOW_ALL:  # the default ACL, inlined: a Python-level call through the port
        allowed = not topic.startswith(RESERVED_TOPIC_PREFIX)  # (AllowAll.can_publish)
    else:
        allowed = acl.can_publish(topic, qos, retain)
    if not allowed:
        stats.publish_denied += 1
        _refuse_publish(conn, qos, packet_id, ReasonCode.NOT_AUTHORIZED)
        return
    now = broker.now() if props is not None else 0.0
    message = routed_message(
        topic, payload, qos, retain, props, session.client_id, now, wire, conn.version
    )
    if retain and payload and (cap := retained_cap_hit(broker, topic, message)) is not None:
        _refuse_retained(conn, qos, packet_id, cap)
        return
    if qos and (gate := broker.acks) is not None and (qos == 2 or _may_hold(broker, retain)):
        _route_held(conn, gate, session, message, packet_id, received & _SAMPLE_MASK == 1)
        return
    quota_drops = stats.quota_drops
    if received & _SAMPLE_MASK != 1:
        delivered = broker.publish(message)
    else:
        started = perf_counter()
        delivered = broker.publish(message)
        stats.route_seconds.observe(perf_counter() - started)
    if not isinstance(delivered, int):  # a large fan-out: acknowledged after its last slice
        dropped = stats.quota_drops != quota_drops
        delivered.routed = partial(_fanned_out, conn, session, qos, packet_id, dropped)
        conn.fanning_out += 1  # the adapter reads nothing more from it meanwhile
        if qos == 2:  # received: a re-send after a reconnect meanwhile is not routed again
            session.inbound_received(packet_id)
        return
    if qos == 1:
        if delivered:
            conn.link.write(puback_bytes(packet_id, 0, conn.version))
        else:
            conn.link.write(
                puback_bytes(packet_id, _undelivered_reason(stats, quota_drops), conn.version)
            )
    elif qos == 2:
        reason = 0 if delivered else _undelivered_reason(stats, quota_drops)
        if reason < 0x80:  # a PUBREC >= 0x80 ends the exchange: no PUBREL will come
            session.inbound_received(packet_id)
        conn.link.write(pubrec_bytes(packet_id, reason, conn.version))


def _fanned_out(
    conn: ClientConnection,
    session: Session,
    qos: int,
    packet_id: int,
    dropped: bool,
    delivered: int,
    quota_dropped: bool,
) -> None:
    """The last slice of a PUBLISH's fan-out is routed (``core.fanout_slices``): its ack."""
    conn.fanning_out -= 1
    if qos == 0:
        return
    reason = 0
    if not delivered:
        reason = _QUOTA if dropped or quota_dropped else ReasonCode.NO_MATCHING_SUBSCRIBERS
    if qos == 2 and reason >= 0x80:  # a PUBREC >= 0x80 ends the exchange: the id is free
        session.inbound_released(packet_id)
    if conn.session is not session:  # gone: the client sends it again
        return
    ack = puback_bytes if qos == 1 else pubrec_bytes
    conn.link.write(ack(packet_id, reason, conn.version))


def _undelivered_reason(stats: BrokerStats, quota_drops_before: int) -> int:
    """The ack's reason for a PUBLISH delivered nowhere: 0x97 when deliveries were dropped
    for a quota (a full queue is not "no matching subscribers"), else 0x10."""
    if stats.quota_drops != quota_drops_before:
        return ReasonCode.QUOTA_EXCEEDED
    return ReasonCode.NO_MATCHING_SUBSCRIBERS


def _may_hold(broker: Broker, retain: bool) -> bool:
    """Whether anything durable may hold a QoS 1 PUBLISH's PUBACK (``core.held_acks``): a
    record of a session on this node (one with a store: ``Broker.durable_sessions``), of a
    retained message, of a shared group's member (here or elsewhere), or what the cluster
    router keeps until another node or Redis has it (``ClusterRouter.may_hold``). Else its
    routing takes no hold and its PUBACK goes when routing is over, as without a held ack:
    the same reason code (the deliveries and quota drops it counted), no bookkeeping."""
    if retain or broker.durable_sessions or len(broker.shared):
        return True
    cluster = broker.cluster
    return cluster is not None and cluster.may_hold()


def _route_held(
    conn: ClientConnection,
    gate: AckGate,
    session: Session,
    message: Message,
    packet_id: int,
    sampled: bool,
) -> None:
    """Route a QoS 1/2 PUBLISH whose PUBACK / PUBREC waits until every durable record of it
    is written (a cluster with ``max_queued_writes`` 0; see ``core.held_acks``)."""
    qos = message.qos
    held = gate.begin(conn, session.client_id, qos, packet_id)
    broker = conn.broker
    quota_drops = broker.stats.quota_drops
    if qos == 2:
        message_ids = session.inbound_ids
        if message_ids is not None:  # the same id on every node it may be sent to again
            message.forward_id = message_ids.message_id(packet_id)
        session.inbound_received(packet_id, held)  # a persistent session's id: recorded
    # every durable record of this message holds the ack (and takes its id, when it has one)
    context = DurableContext(held, message.forward_id)
    if sampled:
        started = perf_counter()
        delivered = broker.publish(message, context)
        broker.stats.route_seconds.observe(perf_counter() - started)
    else:
        delivered = broker.publish(message, context)
    dropped = broker.stats.quota_drops != quota_drops
    if not isinstance(delivered, int):  # a large fan-out: the ack waits for its last slice
        held.waits()  # (counted against the publisher's window meanwhile)
        delivered.routed = partial(_held_fanned_out, conn, held, dropped)
        conn.fanning_out += 1
        return
    held.routed(delivered, dropped)


def _held_fanned_out(
    conn: ClientConnection,
    held: HeldAck,
    dropped: bool,
    delivered: int,
    quota_dropped: bool,
) -> None:
    """The last slice of a held PUBLISH's fan-out is routed: its routing's hold goes."""
    conn.fanning_out -= 1
    held.routed(delivered, dropped or quota_dropped)


def _refuse_retained(conn: ClientConnection, qos: int, packet_id: int, cap: str) -> None:
    """A retained PUBLISH over the retained cap: 0x97 in its ack (MQTT 5), the connection
    closed (MQTT 3.1.1 has no negative ack), QoS 0 dropped; always counted."""
    conn.broker.stats.cap_hit(cap)
    if qos and conn.version != MQTT_5:
        conn.close_with(ReasonCode.QUOTA_EXCEEDED, f"{cap} cap reached")
        return
    if qos == 0:
        conn.broker.stats.drop(cap)
        return
    _refuse_publish(conn, qos, packet_id, ReasonCode.QUOTA_EXCEEDED)


def _refuse_publish(conn: ClientConnection, qos: int, packet_id: int, reason: int) -> None:
    """A PUBLISH that is not routed: QoS 1/2 get the reason in their ack, QoS 0 is dropped."""
    conn.broker.stats.drop("refused_by_ack")
    if qos == 1:
        conn.link.write(puback_bytes(packet_id, reason, conn.version))
    elif qos == 2:
        conn.link.write(pubrec_bytes(packet_id, reason, conn.version))


def on_puback(conn: ClientConnection, packet: Puback) -> None:
    session = conn.session
    if session is not None:
        action = session.on_puback(packet.packet_id, conn.broker.now())
        if action == VIOLATION:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "PUBACK for a QoS 2 message")


def on_pubrec(conn: ClientConnection, packet: Pubrec) -> None:
    session = conn.session
    if session is None:
        return
    # the session writes the PUBREL (or owes it)
    action = session.on_pubrec(packet.packet_id, packet.reason_code, conn.broker.now())
    if action == NOT_FOUND:
        conn.link.write(pubrel_bytes(packet.packet_id, _NOT_FOUND, conn.version))
    elif action == VIOLATION:
        conn.close_with(ReasonCode.PROTOCOL_ERROR, "PUBREC for a QoS 1 message")


def on_pubrel(conn: ClientConnection, packet: Pubrel) -> None:
    session = conn.session
    if session is None:
        return
    packet_id = packet.packet_id
    ids = session.inbound_qos2
    gate = conn.broker.acks
    if packet_id in ids:
        if gate is None or session.store is None:  # nothing durable to wait for
            session.inbound_released(packet_id)
            conn.link.write(pubcomp_bytes(packet_id, 0, conn.version))
            return
        # a persistent session's id (max_queued_writes 0): the PUBCOMP waits for its SREM
        held = gate.complete(conn, session.client_id, packet_id)
        session.inbound_released(packet_id, held)
        held.release()
    elif gate is None or not gate.released_again(conn, session.client_id, packet_id):
        conn.link.write(pubcomp_bytes(packet_id, _NOT_FOUND, conn.version))


def on_pubcomp(conn: ClientConnection, packet: Pubcomp) -> None:
    session = conn.session
    if session is not None:
        action = session.on_pubcomp(packet.packet_id, conn.broker.now())
        if action == VIOLATION:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "PUBCOMP before PUBREC, or for QoS 1")

"""Logging a client in: CONNECT, authentication, the CONNACK that accepts or refuses.

``on_connect`` negotiates the CONNECT's terms and starts one tracked task for the authenticator
(a plain decision, or the first step of an MQTT 5 enhanced-authentication exchange); ``on_auth``
takes the client's AUTH packets: the next step of an exchange, or the re-authentication of a
connected client. An accepted client claims its client id (cluster-wide when clustered), is
attached to its session and gets its CONNACK; the packets it sent meanwhile (held by
``ClientConnection.handle``) are then replayed. ``refuse_connect`` answers a refused attempt
with CONNACK (in the client's protocol version) and closes. The same tracked task reloads a
connected client's ACL when its account changes (``reload_acl``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING

from xmq.codec.packets import MQTT_5, Auth, Connack, Connect
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import ReasonCode, connack_v311_code
from xmq.codec.writer import encode
from xmq.core.auth_ports import AuthDecision, AuthExchange, Credentials
from xmq.core.cluster_claims import claim_cluster_wide
from xmq.core.cluster_ports import ClusterUnavailableError, RestoredSession
from xmq.core.connection_states import AUTHENTICATING, CLOSED, CONNECTED
from xmq.protocol.connect_terms import ConnectRefused, connack_properties, negotiate_connect
from xmq.protocol.topic_aliases import OutboundTopicAliases

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

log = logging.getLogger("xmq.connection")  # one logger for everything about a connection

# MQTT 3.1.1 has no CONNACK code for these: the connection is just closed.
_CLOSE_SILENTLY_V311 = frozenset((ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR))


def on_connect(conn: ClientConnection, connect: Connect) -> None:
    conn.version = connect.protocol_version
    broker = conn.broker
    broker.stats.connects_total += 1
    try:
        terms = negotiate_connect(connect, broker.settings.limits, broker.new_client_id)
    except ConnectRefused as refused:
        refuse_connect(conn, refused.reason_code, str(refused))
        return
    conn.terms = terms
    conn.problem_info = terms.request_problem_information
    credentials = Credentials(
        terms.client_id, connect.username, connect.password, conn.link.peer, conn.version
    )
    conn.state = AUTHENTICATING
    conn.link.pause_reading()
    if terms.authentication_method is not None:
        exchange = conn.authenticator.start_exchange(terms.authentication_method, credentials)
        if exchange is None:
            refuse_connect(conn, ReasonCode.BAD_AUTHENTICATION_METHOD, "authentication method")
            return
        data = connect.properties.authentication_data if connect.properties else None
        _start_task(conn, _exchange_step(conn, exchange, data, connect))
    else:
        _start_task(conn, _authenticate(conn, credentials, connect))


def _start_task(conn: ClientConnection, coro: Coroutine[None, None, None]) -> None:
    task = asyncio.ensure_future(coro)
    conn.auth_task = task
    task.add_done_callback(partial(_task_done, conn))


def _task_done(conn: ClientConnection, task: asyncio.Future[None]) -> None:
    if conn.auth_task is task:
        conn.auth_task = None
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("authentication failed unexpectedly for %s", conn.link.peer, exc_info=error)
        if conn.state == AUTHENTICATING:
            refuse_connect(conn, ReasonCode.SERVER_UNAVAILABLE, "authentication error")
        elif conn.state == CONNECTED:
            conn.close_with(ReasonCode.UNSPECIFIED_ERROR, "re-authentication error")


async def _authenticate(conn: ClientConnection, credentials: Credentials, connect: Connect) -> None:
    decision = await conn.authenticator.authenticate(credentials)
    if conn.state != AUTHENTICATING:
        return
    if decision.reason_code != 0:
        refuse_connect(conn, decision.reason_code, decision.reason_string or "not authorized")
        return
    await _accept(conn, decision, connect, None)


async def _exchange_step(
    conn: ClientConnection, exchange: AuthExchange, data: bytes | None, connect: Connect | None
) -> None:
    step = await exchange.step(data)
    if conn.state == CLOSED:
        return
    method = conn.terms.authentication_method if conn.terms else None
    props = Properties()
    props.authentication_method = method
    props.authentication_data = step.data
    if step.reason_code == ReasonCode.CONTINUE_AUTHENTICATION:
        conn.auth_exchange = (exchange, connect)
        conn.link.write(encode(Auth(ReasonCode.CONTINUE_AUTHENTICATION, props), MQTT_5))
        conn.link.resume_reading()  # the client's next AUTH must get through
        return
    conn.auth_exchange = None
    decision = step.decision or AuthDecision(step.reason_code)
    code = step.reason_code or decision.reason_code
    if connect is None:  # re-authentication of a connected client
        if code != 0:
            conn.close_with(code, decision.reason_string or "re-authentication failed")
            return
        if decision.username != conn.username:
            conn.close_with(ReasonCode.NOT_AUTHORIZED, "re-authentication as another user")
            return
        conn.link.write(encode(Auth(ReasonCode.SUCCESS, props), MQTT_5))
        conn.username = decision.username
        conn.acl = await conn.authorizer.acl_for(decision, conn.client_id)
        return
    if code != 0:
        refuse_connect(conn, code, decision.reason_string or "authentication failed")
        return
    await _accept(conn, decision, connect, props)


def on_auth(conn: ClientConnection, packet: Auth) -> None:
    """AUTH from the client: the next step of an exchange, or a re-authentication."""
    terms = conn.terms
    method = packet.properties.authentication_method if packet.properties else None
    data = packet.properties.authentication_data if packet.properties else None
    if (
        terms is None
        or terms.authentication_method is None
        or method != (terms.authentication_method)
    ):
        conn.close_with(ReasonCode.PROTOCOL_ERROR, "AUTH without the CONNECT's method")
        return
    if packet.reason_code == ReasonCode.CONTINUE_AUTHENTICATION:
        if conn.auth_exchange is None:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "AUTH without an exchange")
            return
        exchange, connect = conn.auth_exchange
        conn.auth_exchange = None
        if connect is not None:
            conn.link.pause_reading()
        _start_task(conn, _exchange_step(conn, exchange, data, connect))
    elif (
        packet.reason_code == ReasonCode.REAUTHENTICATE
        and conn.state == CONNECTED
        and conn.auth_exchange is None
        and conn.auth_task is None
    ):
        credentials = Credentials(conn.client_id, conn.username, None, conn.link.peer, conn.version)
        fresh = conn.authenticator.start_exchange(method, credentials)
        if fresh is None:
            conn.close_with(ReasonCode.BAD_AUTHENTICATION_METHOD, "authentication method")
            return
        _start_task(conn, _exchange_step(conn, fresh, data, None))
    else:
        conn.close_with(ReasonCode.PROTOCOL_ERROR, "unexpected AUTH reason code")


async def _accept(
    conn: ClientConnection, decision: AuthDecision, connect: Connect, props: Properties | None
) -> None:
    acl = await conn.authorizer.acl_for(decision, conn.client_id)
    if conn.state != AUTHENTICATING:
        return
    terms = conn.terms
    assert terms is not None
    broker = conn.broker
    restored: RestoredSession | None = None
    if broker.directory is not None:
        try:  # one batched Redis round trip: this node becomes the client id's owner
            restored = await claim_cluster_wide(broker, terms)
        except ClusterUnavailableError as error:
            refuse_connect(conn, ReasonCode.SERVER_UNAVAILABLE, str(error))
            return
        if conn.state != AUTHENTICATING:
            return
    conn.acl = acl
    conn.username = decision.username
    conn.send_window = min(terms.client_receive_maximum, broker.settings.queues.max_inflight)
    conn.max_packet_size = terms.client_max_packet_size
    if terms.client_topic_alias_maximum:
        conn.out_aliases = OutboundTopicAliases(terms.client_topic_alias_maximum)
    session, present = broker.attach(conn, terms, restored)
    conn.session = session
    session.will = connect.will
    conn.state = CONNECTED
    broker.connections.add(conn)
    stats = broker.stats
    stats.clients_connected += 1
    if stats.clients_connected > stats.clients_maximum:
        stats.clients_maximum = stats.clients_connected
    if conn.version == MQTT_5:
        requested = None
        if connect.properties is not None:
            requested = connect.properties.session_expiry_interval
        ack_props = connack_properties(terms, broker.settings.limits, requested)
        if props is not None:
            ack_props.authentication_method = props.authentication_method
            ack_props.authentication_data = props.authentication_data
        if terms.request_response_information:
            ack_props.response_information = (
                broker.settings.response_information_prefix + terms.client_id
            )
        conn.link.write(encode(Connack(present, 0, ack_props), MQTT_5))
    else:
        conn.link.write(encode(Connack(present, 0), conn.version))
    if terms.keep_alive_s:
        conn.arm_keepalive(terms.keep_alive_s * 1.5)
    now = broker.now()
    if present:
        session.resend_inflight(conn, now)
    pending, conn.held_packets = conn.held_packets, None
    conn.link.resume_reading()
    if pending:
        for packet in pending:
            if conn.state != CONNECTED:
                break
            conn.handle(packet)


def refuse_connect(conn: ClientConnection, reason_code: int, reason: str) -> None:
    """Refuse a connection attempt with CONNACK (MQTT 5 reason or 3.1.1 code), then close."""
    if conn.state == CLOSED:
        return
    stats = conn.broker.stats
    stats.connects_refused += 1
    stats.refused_by_reason[reason_code] = stats.refused_by_reason.get(reason_code, 0) + 1
    log.info(
        "refused %s (%s): 0x%02X %s", conn.link.peer, conn.client_id or "-", reason_code, reason
    )
    if conn.version == MQTT_5:
        props = None
        if conn.problem_info and reason:
            props = Properties()
            props.reason_string = reason
        conn.link.write(encode(Connack(False, reason_code, props), MQTT_5))
    elif conn.version in (3, 4) and reason_code not in _CLOSE_SILENTLY_V311:
        conn.link.write(encode(Connack(False, connack_v311_code(reason_code)), conn.version))
    conn.state = CLOSED
    conn.link.close()


def reload_acl(conn: ClientConnection) -> None:
    """Accounts changed: reload the client's rules and drop subscriptions now denied."""
    if conn.state == CONNECTED and conn.auth_task is None:
        _start_task(conn, _reload_acl(conn))


async def _reload_acl(conn: ClientConnection) -> None:
    decision = AuthDecision(0, conn.username)
    conn.acl = await conn.authorizer.acl_for(decision, conn.client_id)
    session = conn.session
    if session is None or conn.state != CONNECTED:
        return
    for key, sub in list(session.subscriptions.items()):
        if not conn.acl.can_subscribe(sub.topic_filter, sub.qos):
            conn.broker.unsubscribe(session, key)

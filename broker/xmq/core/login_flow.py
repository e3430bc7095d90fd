"""Logging a client in: CONNECT, authentication, the CONNACK that accepts or refuses.

``on_connect`` negotiates the CONNECT's terms and starts one tracked task for the authenticator
(a plain decision, or the first step of an MQTT 5 enhanced-authentication exchange); ``on_auth``
takes the client's AUTH packets: the next step of an exchange, or the re-authentication of a
connected client. An accepted client claims its client id (cluster-wide when clustered), is
attached to its session and gets its CONNACK (``core.connack_encoding``); the packets it sent
meanwhile (held by ``core.login_input``) are then replayed. A login whose authenticator and
authorizer answer at once (``core.inline_auth``) runs inline, without a task.
``refuse_connect`` answers a refused attempt with CONNACK (in the client's protocol version)
and closes. The same tracked task reloads a connected client's ACL when its account changes
(``reload_acl``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from xmq.codec.packets import MQTT_5, Auth, Connect
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import ReasonCode
from xmq.codec.writer import encode
from xmq.core.auth_ports import AuthDecision, AuthExchange, ClientAcl, Credentials
from xmq.core.cluster_claims import claim_cluster_wide
from xmq.core.cluster_ports import ClusterUnavailableError, ForeignSessionError, RestoredSession
from xmq.core.connack_encoding import accepting_connack, refusing_connack
from xmq.core.connection_states import AUTHENTICATING, CLAIMING, CLOSED, CONNECTED
from xmq.core.inline_auth import is_inline_pair
from xmq.core.node_caps import session_cap_hit
from xmq.core.session_access import (
    CLEAN_START,
    identity_of,
    is_foreign,
    recheck_resumed,
    will_refusal,
)
from xmq.core.session_lifecycle import attach, park_unattached
from xmq.protocol.connect_terms import (
    ConnectRefused,
    ConnectTerms,
    negotiate_connect,
)

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

log = logging.getLogger("xmq.connection")  # one logger for everything about a connection

# Refusals of admission control (connection limits and rates): load shedding, logged at DEBUG
# only: a storm refused at thousands per second would otherwise log as many INFO lines. They
# are counted by reason (``stats.refused_by_reason``, per listener in the metrics).
_SHED_CODES = frozenset((ReasonCode.QUOTA_EXCEEDED, ReasonCode.CONNECTION_RATE_EXCEEDED))


def on_connect(conn: ClientConnection, connect: Connect) -> None:
    conn.version = connect.protocol_version
    broker = conn.broker
    broker.stats.connects_total += 1
    try:
        terms = negotiate_connect(connect, broker.settings.limits, broker.new_client_id)
    except ConnectRefused as refused:
        refuse_connect(conn, refused.reason_code, str(refused))
        return
    conn.login_started(terms)
    link = conn.link
    credentials = Credentials(
        terms.client_id, connect.username, connect.password, lambda: link.peer, conn.version
    )
    if terms.authentication_method is not None:
        exchange = conn.authenticator.start_exchange(terms.authentication_method, credentials)
        if exchange is None:
            refuse_connect(conn, ReasonCode.BAD_AUTHENTICATION_METHOD, "authentication method")
            return
        data = connect.properties.authentication_data if connect.properties else None
        _start_task(conn, _exchange_step(conn, exchange, data, connect))
    elif conn.broker.directory is None and is_inline_pair(conn.authenticator, conn.authorizer):
        _login_inline(conn, credentials, connect)
        return
    else:
        _start_task(conn, _authenticate(conn, credentials, connect))
    conn.link.pause_reading()  # reading waits for the login (this read's packets are held)


def _login_inline(conn: ClientConnection, credentials: Credentials, connect: Connect) -> None:
    """The in-memory login, at once within ``handle`` (the embedded default: anonymous, allow
    all, a single node): no task, no coroutine, no loop tick, no held packets, and reading is
    never paused. The same checks and outcome as a login that waits (``_accept``)."""
    try:
        decision = conn.authenticator.decide(credentials)  # type: ignore[attr-defined]
        if decision.reason_code != 0:
            refuse_connect(conn, decision.reason_code, decision.reason_string or "not authorized")
            return
        acl = conn.authorizer.acl_now(decision, credentials.client_id)  # type: ignore[attr-defined]
        owner = identity_of(decision.username)
        if _admissible(conn, connect, acl, owner):
            _admit(conn, decision, connect, None, acl, None, owner)
    except Exception as error:  # noqa: BLE001 - as a task's exception (``_task_done``)
        _finished(conn, error)


def _start_task(conn: ClientConnection, coro: Coroutine[Any, None, None]) -> None:
    """Run ``coro`` as the connection's one tracked task."""
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
        _finished(conn, error)


def _finished(conn: ClientConnection, error: BaseException) -> None:
    log.error("authentication failed unexpectedly for %s", conn.link.peer, exc_info=error)
    if conn.state in (AUTHENTICATING, CLAIMING):
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
    owner = identity_of(decision.username)
    if not _admissible(conn, connect, acl, owner):
        return
    terms = conn.terms
    assert terms is not None
    broker = conn.broker
    refuse_foreign = broker.settings.foreign_session != CLEAN_START
    restored: RestoredSession | None = None
    if broker.directory is not None:
        conn.claim_started()  # out of the connect deadline: the claim has its own bound
        try:  # one batched Redis round trip: this node becomes the client id's owner
            restored = await claim_cluster_wide(broker, terms, owner, refuse_foreign)
        except ClusterUnavailableError as error:
            refuse_connect(conn, ReasonCode.SERVER_UNAVAILABLE, str(error))
            return
        except ForeignSessionError as error:
            refuse_connect(conn, ReasonCode.NOT_AUTHORIZED, str(error))
            return
        if conn.state != CLAIMING:  # the client went away while the claim was on its way
            park_unattached(broker, conn, terms, restored, owner)
            return
        if _foreign_refused(conn, terms, owner, refuse_foreign):
            return
    _admit(conn, decision, connect, props, acl, restored, owner)


def _admissible(conn: ClientConnection, connect: Connect, acl: ClientAcl, owner: str) -> bool:
    """The checks of an authenticated login before its session: the session caps, its will,
    a session of another identity (False: refused, answered and closed)."""
    terms = conn.terms
    assert terms is not None
    broker = conn.broker
    cap = session_cap_hit(broker, terms)
    if cap is not None:
        broker.stats.cap_hit(cap)
        refuse_connect(conn, ReasonCode.QUOTA_EXCEEDED, f"{cap} cap reached")
        return False
    settings = broker.settings
    if connect.will is not None:
        refusal = will_refusal(
            connect.will, acl, settings.max_topic_length, settings.max_topic_levels
        )
        if refusal is not None:
            refuse_connect(conn, *refusal)
            return False
    refuse_foreign = settings.foreign_session != CLEAN_START
    return not _foreign_refused(conn, terms, owner, refuse_foreign)


def _admit(
    conn: ClientConnection,
    decision: AuthDecision,
    connect: Connect,
    props: Properties | None,
    acl: ClientAcl,
    restored: RestoredSession | None,
    owner: str,
) -> None:
    """Accept the login: attach the session, CONNACK, keep alive, replay held packets."""
    terms = conn.terms
    assert terms is not None
    broker = conn.broker
    session, present = attach(broker, conn, terms, restored, owner)
    if present:  # the rules may have changed while it was away
        removed, dropped = recheck_resumed(broker, session, acl)
        if (removed or dropped) and log.isEnabledFor(logging.INFO):
            log.info(
                "%s (%s) resumed: %d subscriptions and %d messages no longer allowed, dropped",
                conn.link.peer,
                terms.client_id,
                removed,
                dropped,
            )
    session.will = connect.will
    conn.login_accepted(session, acl, decision.username)
    conn.link.write(
        accepting_connack(conn.version, terms, broker.settings, connect, props, present)
    )
    if terms.keep_alive_s:
        conn.arm_keepalive(terms.keep_alive_s * 1.5)
    if log.isEnabledFor(logging.DEBUG):  # accepted connects: DEBUG (counted in $SYS, metrics)
        log.debug(
            "accepted %s (%s) v%d%s",
            conn.link.peer,
            terms.client_id,
            conn.version,
            " session present" if present else "",
        )
    if present:
        session.resend_inflight(conn, broker.now())
    pending, conn.held_packets = conn.held_packets, None
    if conn.auth_task is not None:  # a login that waited paused reading (``on_connect``)
        conn.link.resume_reading()
    if pending:
        for packet in pending:
            if conn.state != CONNECTED:
                break
            conn.handle(packet)


def _foreign_refused(
    conn: ClientConnection, terms: ConnectTerms, owner: str, refuse_foreign: bool
) -> bool:
    """A session of another identity under this client id: refuse the CONNECT (True, its
    client is not disturbed) or, with the ``clean_start`` policy, start clean."""
    existing = conn.broker.sessions.get(terms.client_id)
    if existing is None or not is_foreign(existing, owner):
        return False
    if refuse_foreign:
        refuse_connect(conn, ReasonCode.NOT_AUTHORIZED, "client id in use by another user")
        return True
    terms.clean_start = True
    return False


def refuse_connect(conn: ClientConnection, reason_code: int, reason: str) -> None:
    """Refuse a connection attempt with CONNACK (MQTT 5 reason or 3.1.1 code), then close."""
    if conn.state == CLOSED:
        return
    stats = conn.broker.stats
    stats.connects_refused += 1
    stats.refused_by_reason[reason_code] = stats.refused_by_reason.get(reason_code, 0) + 1
    level = logging.DEBUG if reason_code in _SHED_CODES else logging.INFO
    if log.isEnabledFor(level):
        log.log(
            level,
            "refused %s (%s): 0x%02X %s",
            conn.link.peer,
            conn.client_id or "-",
            reason_code,
            reason,
        )
    data = refusing_connack(conn.version, reason_code, reason, conn.problem_info)
    if data is not None:
        conn.link.write(data)
    conn.login_refused()
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
    will = session.will
    if will is not None and not conn.acl.can_publish(will.topic, will.qos, will.retain):
        session.will = None  # no longer allowed: never published

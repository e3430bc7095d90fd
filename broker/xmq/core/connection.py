"""One client connection: the MQTT state machine between the network and the broker.

The network adapter feeds decoded packets to ``handle`` synchronously. CONNECT and AUTH wait
for the authenticator (a tracked task per login, never per packet); packets that arrive in the
meantime are held and replayed. Everything else runs inline and writes through ``ClientLink``,
which coalesces writes once per loop tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from xmq.codec.errors import ProtocolError, UnsupportedProtocolVersion
from xmq.codec.packets import (
    MQTT_5,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Unsubscribe,
)
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import ReasonCode, connack_v311_code
from xmq.codec.writer import encode
from xmq.core.auth_ports import (
    AllowAll,
    AuthDecision,
    Authenticator,
    AuthExchange,
    Authorizer,
    ClientAcl,
    Credentials,
)
from xmq.core.cluster_claims import claim_cluster_wide
from xmq.core.cluster_ports import ClusterUnavailableError, RestoredSession
from xmq.core.message import Message
from xmq.core.ports import ClientLink
from xmq.core.publish_flow import on_puback, on_pubcomp, on_publish, on_pubrec, on_pubrel
from xmq.core.session import Session
from xmq.core.subscribe_flow import handle_subscribe, handle_unsubscribe
from xmq.protocol.connect_terms import (
    ConnectRefused,
    ConnectTerms,
    connack_properties,
    negotiate_connect,
)
from xmq.protocol.topic_aliases import InboundTopicAliases, OutboundTopicAliases

if TYPE_CHECKING:
    from xmq.core.broker import Broker

log = logging.getLogger("xmq.connection")

AWAIT_CONNECT, AUTHENTICATING, CONNECTED, CLOSED = range(4)
_PINGRESP = b"\xd0\x00"
# MQTT 3.1.1 has no CONNACK code for these: the connection is just closed.
_CLOSE_SILENTLY_V311 = frozenset((ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR))
_ALLOW_ALL = AllowAll()


class ClientConnection:
    """The per-connection MQTT state machine (one per network connection)."""

    __slots__ = (
        "_auth_task",
        "_exchange",
        "_keepalive_handle",
        "_pending",
        "acl",
        "authenticator",
        "authorizer",
        "broker",
        "in_aliases",
        "last_seen",
        "link",
        "max_packet_size",
        "out_aliases",
        "problem_info",
        "send_window",
        "session",
        "state",
        "terms",
        "username",
        "version",
        "will_on_close",
    )

    def __init__(
        self,
        broker: Broker,
        link: ClientLink,
        authenticator: Authenticator,
        authorizer: Authorizer,
    ) -> None:
        self.broker = broker
        self.link = link
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.state = AWAIT_CONNECT
        self.version = 0
        self.terms: ConnectTerms | None = None
        self.session: Session | None = None
        self.acl: ClientAcl = _ALLOW_ALL
        self.username: str | None = None
        self.send_window = 0
        self.max_packet_size = 268_435_460
        self.out_aliases: OutboundTopicAliases | None = None
        self.in_aliases = InboundTopicAliases(broker.settings.limits.topic_alias_maximum)
        self.problem_info = True
        self.will_on_close = True
        self.last_seen = broker.now()
        self._pending: list[Packet] | None = None
        self._auth_task: asyncio.Future[None] | None = None
        self._exchange: tuple[AuthExchange, Connect | None] | None = None
        self._keepalive_handle: asyncio.TimerHandle | None = None

    # -- input ------------------------------------------------------------------------------

    def handle(self, packet: Packet) -> None:
        """Process one decoded packet (called by the network adapter, in order)."""
        state = self.state
        if state == CONNECTED:
            handler = _HANDLERS.get(type(packet))
            if handler is None:
                self.close_with(ReasonCode.PROTOCOL_ERROR, f"unexpected {type(packet).__name__}")
                return
            handler(self, packet)
        elif state == AUTHENTICATING:
            if self._pending is None:
                self._pending = []
            if isinstance(packet, Auth):
                self._on_auth(packet)
            else:
                self._pending.append(packet)
        elif state == AWAIT_CONNECT:
            if isinstance(packet, Connect):
                self._on_connect(packet)
            else:
                self._refuse(ReasonCode.PROTOCOL_ERROR, "the first packet must be CONNECT")

    def protocol_error(self, error: ProtocolError) -> None:
        """The decoder refused the input: answer with the error's reason code and close."""
        if isinstance(error, UnsupportedProtocolVersion):
            self.version = 4  # an unknown level is answered in the 3.1.1 format (code 0x01)
            self._refuse(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, str(error))
        elif self.state == AWAIT_CONNECT:
            # A CONNECT that failed after its protocol level was read is answered in that
            # version's format (3.1.x: CONNACK with the mapped code); before that: closed.
            self.version = error.protocol_version or 0
            self._refuse(error.reason_code, str(error))
        else:
            self.close_with(error.reason_code, str(error))

    def touch(self, now: float) -> None:
        self.last_seen = now

    def on_pubacks(self, packet_ids: list[int]) -> None:
        """Plain PUBACKs recognised in bulk by the adapter (see codec.puback_batch)."""
        session = self.session
        if session is None:
            return
        now = self.last_seen  # the adapter stamped it with the loop's time for this read
        acknowledge = session.acknowledge
        for packet_id in packet_ids:
            acknowledge(packet_id, now)

    # -- CONNECT and authentication ---------------------------------------------------------

    def _on_connect(self, connect: Connect) -> None:
        self.version = connect.protocol_version
        broker = self.broker
        broker.stats.connects_total += 1
        try:
            terms = negotiate_connect(connect, broker.settings.limits, broker.new_client_id)
        except ConnectRefused as refused:
            self._refuse(refused.reason_code, str(refused))
            return
        self.terms = terms
        self.problem_info = terms.request_problem_information
        credentials = Credentials(
            terms.client_id, connect.username, connect.password, self.link.peer, self.version
        )
        self.state = AUTHENTICATING
        self.link.pause_reading()
        if terms.authentication_method is not None:
            exchange = self.authenticator.start_exchange(terms.authentication_method, credentials)
            if exchange is None:
                self._refuse(ReasonCode.BAD_AUTHENTICATION_METHOD, "authentication method")
                return
            data = connect.properties.authentication_data if connect.properties else None
            self._start_task(self._exchange_step(exchange, data, connect))
        else:
            self._start_task(self._authenticate(credentials, connect))

    def _start_task(self, coro: Coroutine[None, None, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._auth_task = task
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[None]) -> None:
        if self._auth_task is task:
            self._auth_task = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("authentication failed unexpectedly for %s", self.link.peer, exc_info=error)
            if self.state == AUTHENTICATING:
                self._refuse(ReasonCode.SERVER_UNAVAILABLE, "authentication error")
            elif self.state == CONNECTED:
                self.close_with(ReasonCode.UNSPECIFIED_ERROR, "re-authentication error")

    async def _authenticate(self, credentials: Credentials, connect: Connect) -> None:
        decision = await self.authenticator.authenticate(credentials)
        if self.state != AUTHENTICATING:
            return
        if decision.reason_code != 0:
            self._refuse(decision.reason_code, decision.reason_string or "not authorized")
            return
        await self._accept(decision, connect, None)

    async def _exchange_step(
        self, exchange: AuthExchange, data: bytes | None, connect: Connect | None
    ) -> None:
        step = await exchange.step(data)
        if self.state == CLOSED:
            return
        method = self.terms.authentication_method if self.terms else None
        props = Properties()
        props.authentication_method = method
        props.authentication_data = step.data
        if step.reason_code == ReasonCode.CONTINUE_AUTHENTICATION:
            self._exchange = (exchange, connect)
            self.link.write(encode(Auth(ReasonCode.CONTINUE_AUTHENTICATION, props), MQTT_5))
            self.link.resume_reading()  # the client's next AUTH must get through
            return
        self._exchange = None
        decision = step.decision or AuthDecision(step.reason_code)
        code = step.reason_code or decision.reason_code
        if connect is None:  # re-authentication of a connected client
            if code != 0:
                self.close_with(code, decision.reason_string or "re-authentication failed")
                return
            if decision.username != self.username:
                self.close_with(ReasonCode.NOT_AUTHORIZED, "re-authentication as another user")
                return
            self.link.write(encode(Auth(ReasonCode.SUCCESS, props), MQTT_5))
            self.username = decision.username
            self.acl = await self.authorizer.acl_for(decision, self.client_id)
            return
        if code != 0:
            self._refuse(code, decision.reason_string or "authentication failed")
            return
        await self._accept(decision, connect, props)

    def _on_auth(self, packet: Auth) -> None:
        """AUTH from the client: the next step of an exchange, or a re-authentication."""
        terms = self.terms
        method = packet.properties.authentication_method if packet.properties else None
        data = packet.properties.authentication_data if packet.properties else None
        if (
            terms is None
            or terms.authentication_method is None
            or method != (terms.authentication_method)
        ):
            self.close_with(ReasonCode.PROTOCOL_ERROR, "AUTH without the CONNECT's method")
            return
        if packet.reason_code == ReasonCode.CONTINUE_AUTHENTICATION:
            if self._exchange is None:
                self.close_with(ReasonCode.PROTOCOL_ERROR, "AUTH without an exchange")
                return
            exchange, connect = self._exchange
            self._exchange = None
            if connect is not None:
                self.link.pause_reading()
            self._start_task(self._exchange_step(exchange, data, connect))
        elif (
            packet.reason_code == ReasonCode.REAUTHENTICATE
            and self.state == CONNECTED
            and self._exchange is None
            and self._auth_task is None
        ):
            credentials = Credentials(
                self.client_id, self.username, None, self.link.peer, self.version
            )
            fresh = self.authenticator.start_exchange(method, credentials)
            if fresh is None:
                self.close_with(ReasonCode.BAD_AUTHENTICATION_METHOD, "authentication method")
                return
            self._start_task(self._exchange_step(fresh, data, None))
        else:
            self.close_with(ReasonCode.PROTOCOL_ERROR, "unexpected AUTH reason code")

    async def _accept(
        self, decision: AuthDecision, connect: Connect, props: Properties | None
    ) -> None:
        acl = await self.authorizer.acl_for(decision, self.client_id)
        if self.state != AUTHENTICATING:
            return
        terms = self.terms
        assert terms is not None
        broker = self.broker
        restored: RestoredSession | None = None
        if broker.directory is not None:
            try:  # one batched Redis round trip: this node becomes the client id's owner
                restored = await claim_cluster_wide(broker, terms)
            except ClusterUnavailableError as error:
                self._refuse(ReasonCode.SERVER_UNAVAILABLE, str(error))
                return
            if self.state != AUTHENTICATING:
                return
        self.acl = acl
        self.username = decision.username
        self.send_window = min(terms.client_receive_maximum, broker.settings.queues.max_inflight)
        self.max_packet_size = terms.client_max_packet_size
        if terms.client_topic_alias_maximum:
            self.out_aliases = OutboundTopicAliases(terms.client_topic_alias_maximum)
        session, present = broker.attach(self, terms, restored)
        self.session = session
        session.will = connect.will
        self.state = CONNECTED
        broker.connections.add(self)
        stats = broker.stats
        stats.clients_connected += 1
        if stats.clients_connected > stats.clients_maximum:
            stats.clients_maximum = stats.clients_connected
        if self.version == MQTT_5:
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
            self.link.write(encode(Connack(present, 0, ack_props), MQTT_5))
        else:
            self.link.write(encode(Connack(present, 0), self.version))
        if terms.keep_alive_s:
            self._arm_keepalive(terms.keep_alive_s * 1.5)
        now = broker.now()
        if present:
            session.resend_inflight(self, now)
        pending, self._pending = self._pending, None
        self.link.resume_reading()
        if pending:
            for packet in pending:
                if self.state != CONNECTED:
                    break
                self.handle(packet)

    @property
    def client_id(self) -> str:
        return self.terms.client_id if self.terms is not None else ""

    # -- keep alive -------------------------------------------------------------------------

    def _arm_keepalive(self, delay: float) -> None:
        self._keepalive_handle = self.broker.loop.call_later(delay, self._keepalive_due)

    def _keepalive_due(self) -> None:
        self._keepalive_handle = None
        terms = self.terms
        if self.state != CONNECTED or terms is None:
            return
        limit = terms.keep_alive_s * 1.5
        idle = self.broker.now() - self.last_seen
        if idle >= limit:
            self.close_with(ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
        else:
            self._arm_keepalive(limit - idle)

    # -- closing ----------------------------------------------------------------------------

    def _refuse(self, reason_code: int, reason: str) -> None:
        """Refuse a connection attempt with CONNACK (MQTT 5 reason or 3.1.1 code), then close."""
        if self.state == CLOSED:
            return
        stats = self.broker.stats
        stats.connects_refused += 1
        stats.refused_by_reason[reason_code] = stats.refused_by_reason.get(reason_code, 0) + 1
        log.info(
            "refused %s (%s): 0x%02X %s", self.link.peer, self.client_id or "-", reason_code, reason
        )
        if self.version == MQTT_5:
            props = None
            if self.problem_info and reason:
                props = Properties()
                props.reason_string = reason
            self.link.write(encode(Connack(False, reason_code, props), MQTT_5))
        elif self.version in (3, 4) and reason_code not in _CLOSE_SILENTLY_V311:
            self.link.write(encode(Connack(False, connack_v311_code(reason_code)), self.version))
        self.state = CLOSED
        self.link.close()

    def refuse(self, reason_code: int, reason: str, protocol_version: int) -> None:
        """Refuse a CONNECT before it is negotiated (admission limits of the network adapter)."""
        if self.state != AWAIT_CONNECT:
            return
        self.version = protocol_version
        self.broker.stats.connects_total += 1
        self._refuse(reason_code, reason)

    def close_with(
        self, reason_code: int, reason: str = "", server_reference: str | None = None
    ) -> None:
        """Close a connection, telling an MQTT 5 client why (DISCONNECT with the reason).

        ``server_reference`` (with 0x9C Use another server) names where the client should go.
        """
        if self.state == CLOSED:
            return
        if self.state != CONNECTED:
            self._refuse(reason_code, reason)
            return
        closed = self.broker.stats.disconnects_by_reason
        closed[reason_code] = closed.get(reason_code, 0) + 1
        if log.isEnabledFor(logging.INFO):
            log.info(
                "closing %s (%s): 0x%02X %s", self.link.peer, self.client_id, reason_code, reason
            )
        if self.version == MQTT_5:
            props = None
            if self.problem_info and reason:
                props = Properties()
                props.reason_string = reason
            if server_reference:
                props = props or Properties()
                props.server_reference = server_reference
            self.link.write(encode(Disconnect(reason_code, props), MQTT_5))
        self._detach(publish_will=True)
        self.link.close()

    def take_over(self) -> None:
        """Another connection claimed this client id (0x8E to this one)."""
        self.close_with(ReasonCode.SESSION_TAKEN_OVER, "session taken over")

    def connection_lost(self) -> None:
        """The network connection is gone (called by the adapter exactly once)."""
        if self.state == CONNECTED:
            self._detach(publish_will=self.will_on_close)
        if self._auth_task is not None:
            self._auth_task.cancel()
        self.state = CLOSED

    def _detach(self, publish_will: bool) -> None:
        if self.state != CONNECTED:
            return
        self.state = CLOSED
        broker = self.broker
        broker.connections.discard(self)
        broker.stats.clients_connected -= 1
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None
        if self.session is not None:
            broker.detach(self.session, self, publish_will)

    def refresh_acl(self) -> None:
        """Accounts changed: reload this client's rules and drop subscriptions now denied."""
        if self.state == CONNECTED and self._auth_task is None:
            self._start_task(self._reload_acl())

    async def _reload_acl(self) -> None:
        decision = AuthDecision(0, self.username)
        self.acl = await self.authorizer.acl_for(decision, self.client_id)
        session = self.session
        if session is None or self.state != CONNECTED:
            return
        for key, sub in list(session.subscriptions.items()):
            if not self.acl.can_subscribe(sub.topic_filter, sub.qos):
                self.broker.unsubscribe(session, key)

    # -- output -----------------------------------------------------------------------------

    def send_publish(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        packet_id: int,
        now: float,
        dup: bool = False,
    ) -> bool:
        """Write one PUBLISH (False when it exceeds the client's Maximum Packet Size)."""
        aliases = self.out_aliases
        if aliases is None:
            head, tail = message.encode(self.version, qos, retain, subscription_ids, 0, True, now)
        else:
            alias, is_new = aliases.assign(message.topic)
            head, tail = message.encode(
                self.version, qos, retain, subscription_ids, alias, is_new, now
            )
        if len(head) + len(tail) + 2 > self.max_packet_size:
            self.broker.stats.drop("too_large_for_client")
            return False
        if dup:
            head = bytes((head[0] | 0x08,)) + head[1:]
        self.link.write_publish(head, packet_id, tail)
        stats = self.broker.stats
        stats.messages_sent += 1
        stats.sent_by_qos[qos] += 1
        stats.sent_bytes_by_qos[qos] += len(message.payload)
        return True

    def accepts_qos0(self) -> bool:
        return self.state == CONNECTED and self.link.writable()

    def write_packet(self, packet: Packet) -> None:
        self.link.write(encode(packet, self.version))

    def reason_properties(self, reason: str) -> Properties | None:
        """A Reason String property, only when the client allows problem information."""
        if self.version != MQTT_5 or not self.problem_info:
            return None
        props = Properties()
        props.reason_string = reason
        return props


def _on_pingreq(conn: ClientConnection, packet: Pingreq) -> None:
    conn.link.write(_PINGRESP)


def _on_disconnect(conn: ClientConnection, packet: Disconnect) -> None:
    session = conn.session
    props = packet.properties
    if session is not None and props is not None and props.session_expiry_interval is not None:
        if session.expiry_s == 0 and props.session_expiry_interval != 0:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "session expiry set after 0")
            return
        session.expiry_s = props.session_expiry_interval
    conn.will_on_close = packet.reason_code == ReasonCode.DISCONNECT_WITH_WILL
    conn._detach(publish_will=conn.will_on_close)
    conn.link.close()


_HANDLERS: dict[type, Callable[[ClientConnection, Any], None]] = {
    Publish: on_publish,
    Puback: on_puback,
    Pubrec: on_pubrec,
    Pubrel: on_pubrel,
    Pubcomp: on_pubcomp,
    Subscribe: handle_subscribe,
    Unsubscribe: handle_unsubscribe,
    Pingreq: _on_pingreq,
    Disconnect: _on_disconnect,
    Auth: ClientConnection._on_auth,
}

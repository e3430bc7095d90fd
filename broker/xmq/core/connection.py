"""One client connection: the MQTT state machine between the network and the broker.

The network adapter feeds decoded packets to ``handle`` synchronously. CONNECT and AUTH go to
``login_flow``, which waits for the authenticator (a tracked task per login, never per packet);
packets that arrive in the meantime are held here and replayed. Everything else runs inline and
writes through ``ClientLink``, which coalesces writes once per loop tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xmq.codec.errors import ProtocolError, UnsupportedProtocolVersion
from xmq.codec.packets import (
    MQTT_5,
    Auth,
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
from xmq.codec.reason_codes import DISCONNECT_REASONS, ReasonCode
from xmq.codec.writer import PINGRESP_BYTES, encode
from xmq.core.auth_ports import AllowAll, Authenticator, AuthExchange, Authorizer, ClientAcl
from xmq.core.connection_states import (
    AUTHENTICATING,
    AWAIT_CONNECT,
    CLAIM_STARTED,
    CLAIMING,
    CLOSED,
    CONNECT_RECEIVED,
    CONNECTED,
    ENDED,
    EVENTS,
    LOGIN_ACCEPTED,
    NEXT_STATE,
    IllegalTransition,
    next_state,
)
from xmq.core.login_flow import on_auth, on_connect, refuse_connect, reload_acl
from xmq.core.message import Message
from xmq.core.ports import ClientLink
from xmq.core.publish_flow import on_puback, on_pubcomp, on_publish, on_pubrec, on_pubrel
from xmq.core.retained_feed import RetainedFeed
from xmq.core.session import Session
from xmq.core.session_client import SessionClient
from xmq.core.subscribe_flow import handle_subscribe, handle_unsubscribe
from xmq.protocol.connect_terms import ConnectTerms
from xmq.protocol.outbound_qos import VIOLATION
from xmq.protocol.topic_aliases import InboundTopicAliases, OutboundTopicAliases

if TYPE_CHECKING:
    from xmq.core.broker import Broker

log = logging.getLogger("xmq.connection")

# CONNACK-only refusals said on a live connection (a failed re-authentication)
_AS_DISCONNECT: dict[int, int] = {
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: ReasonCode.NOT_AUTHORIZED,
    ReasonCode.BANNED: ReasonCode.NOT_AUTHORIZED,
    ReasonCode.BAD_AUTHENTICATION_METHOD: ReasonCode.NOT_AUTHORIZED,
}

MAX_HELD_PACKETS = 1024
"""Packets a client may pipeline after its CONNECT, held until the CONNACK."""
MAX_PENDING_BEFORE_CONNACK = 65_536
"""Bytes of an incomplete packet read during an enhanced-authentication exchange."""
_ALLOW_ALL = AllowAll()


class ClientConnection(SessionClient):
    """The per-connection MQTT state machine (one per network connection); the session's
    client (``core.session_client``: ``link``, ``version`` and ``send_window`` are its
    fields)."""

    __slots__ = (
        "acl",
        "auth_exchange",
        "auth_task",
        "authenticator",
        "authorizer",
        "broker",
        "held_packets",
        "in_aliases",
        "last_seen",
        "max_packet_size",
        "out_aliases",
        "problem_info",
        "retained_feed",
        "session",
        "state",
        "terms",
        "fanning_out",
        "username",
        "wheel_slot",
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
        self.in_aliases: InboundTopicAliases | None = None  # made on its first aliased PUBLISH
        self.problem_info = True
        self.will_on_close = True
        self.last_seen = broker.now()
        # login_flow's state: packets held while authenticating, its one tracked task (the
        # authenticator, an ACL reload), an enhanced-auth exchange awaiting the client's AUTH
        self.held_packets: list[Packet] | None = None
        self.auth_task: asyncio.Future[None] | None = None
        self.auth_exchange: tuple[AuthExchange, Connect | None] | None = None
        self.wheel_slot = 0  # its slot in the broker's deadline wheel (0: not filed)
        self.retained_feed: RetainedFeed | None = None  # retained messages still owed
        self.fanning_out = 0  # its PUBLISHes still being fanned out (``core.fanout_slices``)

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
        elif state in (AUTHENTICATING, CLAIMING):
            if isinstance(packet, Auth):
                on_auth(self, packet)
            else:
                self._hold(packet)
        elif state == AWAIT_CONNECT:
            if isinstance(packet, Connect):
                on_connect(self, packet)
            else:
                refuse_connect(self, ReasonCode.PROTOCOL_ERROR, "the first packet must be CONNECT")

    def _hold(self, packet: Packet) -> None:
        """A packet sent before the CONNACK: held until the login is accepted, within bounds.

        With enhanced authentication only AUTH and DISCONNECT may come before the CONNACK
        [MQTT-3.1.2-30]: anything else is a protocol error, a DISCONNECT ends the attempt.
        Otherwise (a client may pipeline after its CONNECT) at most ``MAX_HELD_PACKETS`` are
        held: reading is paused meanwhile, so they came in the CONNECT's read.
        """
        terms = self.terms
        if terms is not None and terms.authentication_method is not None:
            if isinstance(packet, Disconnect):
                self.state = next_state(self.state, ENDED)
                self.link.close()
            else:
                refuse_connect(self, ReasonCode.PROTOCOL_ERROR, "only AUTH before the CONNACK")
            return
        held = self.held_packets
        if held is None:
            held = self.held_packets = []
        if len(held) >= MAX_HELD_PACKETS:
            refuse_connect(self, ReasonCode.QUOTA_EXCEEDED, "too many packets before the CONNACK")
            return
        held.append(packet)

    def accepts_pending(self, pending: int) -> bool:
        """Whether ``pending`` bytes of an incomplete packet may wait in the network adapter.

        During an enhanced-authentication exchange (reading is open for the client's AUTH)
        at most ``MAX_PENDING_BEFORE_CONNACK``: an AUTH is small, and nothing else may come.
        """
        if pending <= MAX_PENDING_BEFORE_CONNACK or self.state == CONNECTED:
            return True
        terms = self.terms
        return self.state == AWAIT_CONNECT or terms is None or terms.authentication_method is None

    def refuse_pending(self) -> None:
        """Too many bytes of an incomplete packet before the CONNACK (``accepts_pending``)."""
        refuse_connect(self, ReasonCode.PACKET_TOO_LARGE, "too much data before the CONNACK")

    def login_overdue(self) -> bool:
        """The connect deadline came: True while the login still waits for the client (its
        CONNECT, the password check, an AUTH of an exchange), not while its session is claimed
        cluster-wide (``CLAIMING``: bounded by the claim itself)."""
        return self.state in (AWAIT_CONNECT, AUTHENTICATING)

    def protocol_error(self, error: ProtocolError) -> None:
        """The decoder refused the input: answer with the error's reason code and close."""
        if isinstance(error, UnsupportedProtocolVersion):
            # Level 5 under a wrong protocol name is an MQTT 5 client: 0x84 in its own format
            # (MQTT-3.1.2-1); any other unknown level gets the 3.1.1 format (code 0x01).
            self.version = 5 if error.protocol_version == 5 else 4
            refuse_connect(self, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, str(error))
        elif self.state == AWAIT_CONNECT:
            # A CONNECT that failed after its protocol level was read is answered in that
            # version's format (3.1.x: CONNACK with the mapped code); before that: closed.
            self.version = error.protocol_version or 0
            refuse_connect(self, error.reason_code, str(error))
        else:
            self.close_with(error.reason_code, str(error))

    def touch(self, now: float) -> None:
        self.last_seen = now

    def on_pubacks(self, packet_ids: list[int]) -> None:
        """Plain PUBACKs recognised in bulk by the adapter (see codec.puback_batch)."""
        for packet_id in packet_ids:  # compiled: a C call each (a bound method would not be)
            if not self.on_plain_puback(packet_id):
                return

    def on_plain_puback(self, packet_id: int) -> bool:
        """One plain PUBACK recognised by the adapter (a read of exactly one: no list made
        for it); False when it closed the connection (a PUBACK for a QoS 2 message)."""
        session = self.session
        if session is None:
            return True
        # ``now``: the adapter stamped ``last_seen`` with the loop's time for this read
        if session.on_puback(packet_id, self.last_seen) == VIOLATION:
            self.close_with(ReasonCode.PROTOCOL_ERROR, "PUBACK for a QoS 2 message")
            return False
        return True

    def inbound_aliases(self) -> InboundTopicAliases:
        """The topic aliases this client sets (made when its first PUBLISH uses one: most
        clients never do, and an idle connection holds no table)."""
        aliases = self.in_aliases
        if aliases is None:
            limit = self.broker.settings.limits.topic_alias_maximum
            aliases = self.in_aliases = InboundTopicAliases(limit)
        return aliases

    @property
    def client_id(self) -> str:
        return self.terms.client_id if self.terms is not None else ""

    # -- the login's transitions: ``login_flow`` says what happened, the connection moves --

    def login_started(self, terms: ConnectTerms) -> None:
        """Its CONNECT was negotiated to ``terms``: the authenticator decides next."""
        after = NEXT_STATE[self.state * EVENTS + CONNECT_RECEIVED]  # next_state, inlined
        if after < 0:
            raise IllegalTransition(self.state, CONNECT_RECEIVED)
        self.state = after
        self.terms = terms
        self.problem_info = terms.request_problem_information

    def claim_started(self) -> None:
        """Authenticated: its session is claimed cluster-wide (out of the connect deadline)."""
        self.state = next_state(self.state, CLAIM_STARTED)

    def login_accepted(self, session: Session, acl: ClientAcl, username: str | None) -> None:
        """Accepted and attached to ``session`` (the caller writes the CONNACK next): what
        was granted takes effect, the connection is counted, its connect deadline dropped."""
        after = NEXT_STATE[self.state * EVENTS + LOGIN_ACCEPTED]  # next_state, inlined
        if after < 0:
            raise IllegalTransition(self.state, LOGIN_ACCEPTED)
        self.state = after
        terms = self.terms
        assert terms is not None  # set by ``login_started``
        broker = self.broker
        self.session = session
        self.acl = acl
        self.username = username
        self.send_window = min(terms.client_receive_maximum, broker.settings.queues.max_inflight)
        self.max_packet_size = terms.client_max_packet_size
        if terms.client_topic_alias_maximum:
            self.out_aliases = OutboundTopicAliases(terms.client_topic_alias_maximum)
        broker.connections.add(self)
        stats = broker.stats
        stats.clients_connected += 1
        if stats.clients_connected > stats.clients_maximum:
            stats.clients_maximum = stats.clients_connected
        self.link.login_accepted()

    def login_refused(self) -> None:
        """Its attempt was refused (the caller wrote the CONNACK and closes the link)."""
        self.state = next_state(self.state, ENDED)

    # -- keep alive -------------------------------------------------------------------------

    def arm_keepalive(self, delay: float) -> None:
        """Check this connection's keep alive ``delay`` seconds from now (the shared wheel)."""
        broker = self.broker
        broker.deadlines.add(self, broker.now() + delay)

    def wheel_due(self, now: float) -> float | None:
        """The wheel's check: close a connection silent for 1.5 x keep alive (0x8D), else
        return when to check it next."""
        terms = self.terms
        if self.state != CONNECTED or terms is None:
            return None
        limit = terms.keep_alive_s * 1.5
        if now - self.last_seen >= limit:
            self.close_with(ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
            return None
        return self.last_seen + limit

    # -- closing ----------------------------------------------------------------------------

    def refuse(self, reason_code: int, reason: str, protocol_version: int) -> None:
        """Refuse a CONNECT before it is negotiated (admission limits of the network adapter)."""
        if self.state != AWAIT_CONNECT:
            return
        self.version = protocol_version
        self.broker.stats.connects_total += 1
        refuse_connect(self, reason_code, reason)

    def close_with(
        self, reason_code: int, reason: str = "", server_reference: str | None = None
    ) -> None:
        """Close a connection, telling an MQTT 5 client why (DISCONNECT with the reason).

        ``server_reference`` (with 0x9C Use another server) names where the client should go.
        """
        if self.state == CLOSED:
            return
        if self.state != CONNECTED:
            refuse_connect(self, reason_code, reason)
            return
        if reason_code not in DISCONNECT_REASONS:
            # a DISCONNECT carries DISCONNECT reason codes only (MQTT-3.14.2-1): a refusal
            # that CONNACK alone can say (a failed re-authentication's 0x86, 0x8C) is 0x87
            reason_code = _AS_DISCONNECT.get(reason_code, ReasonCode.UNSPECIFIED_ERROR)
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
            data = encode(Disconnect(reason_code, props), MQTT_5)
            if len(data) > self.max_packet_size and props is not None and props.reason_string:
                # no Reason String beyond the client's Maximum Packet Size (MQTT-3.14.2-3)
                props.reason_string = None
                data = encode(Disconnect(reason_code, props), MQTT_5)
            self.link.write(data)
        self._detach(publish_will=True)
        self.link.close()

    def take_over(self) -> None:
        """Another connection claimed this client id (0x8E to this one)."""
        self.close_with(ReasonCode.SESSION_TAKEN_OVER, "session taken over")

    def connection_lost(self) -> None:
        """The network connection is gone (called by the adapter exactly once)."""
        if self.state == CONNECTED:
            self._detach(publish_will=self.will_on_close)
        if self.auth_task is not None and self.state != CLAIMING:
            # a claim runs to its end (bounded by ``cluster.connect_wait_s``): Redis may have
            # made this node the owner, which the login flow then parks here
            self.auth_task.cancel()
        self.state = next_state(self.state, ENDED)

    def _detach(self, publish_will: bool) -> None:
        if self.state != CONNECTED:
            return
        self.state = next_state(CONNECTED, ENDED)
        broker = self.broker
        broker.connections.discard(self)
        broker.stats.clients_connected -= 1
        if self.wheel_slot:
            broker.deadlines.remove(self)
        if self.retained_feed is not None:
            self.retained_feed.stop()
        if self.session is not None:
            broker.detach(self.session, self, publish_will)

    def refresh_acl(self) -> None:
        """Accounts changed: reload this client's rules and drop subscriptions now denied."""
        reload_acl(self)

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
        stats.count_sent(qos, len(message.payload))
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
    conn.link.write(PINGRESP_BYTES)


def _on_disconnect(conn: ClientConnection, packet: Disconnect) -> None:
    session = conn.session
    props = packet.properties
    if session is not None and props is not None and props.session_expiry_interval is not None:
        if session.expiry_s == 0 and props.session_expiry_interval != 0:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "session expiry set after 0")
            return
        conn.broker.set_expiry(session, props.session_expiry_interval)
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
    Auth: on_auth,
}

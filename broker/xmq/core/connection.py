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
from xmq.codec.reason_codes import ReasonCode
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, Authenticator, AuthExchange, Authorizer, ClientAcl
from xmq.core.connected_packets import (
    closing_disconnect,
    disconnect_reason_code,
    on_disconnect,
    on_pingreq,
)
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
from xmq.core.login_input import hold_packet
from xmq.core.message import Message
from xmq.core.ports import ClientLink
from xmq.core.publish_flow import on_puback, on_pubcomp, on_publish, on_pubrec, on_pubrel
from xmq.core.retained_feed import RetainedFeed
from xmq.core.session import Session
from xmq.core.session_client import SessionClient
from xmq.core.session_lifecycle import detach
from xmq.core.subscribe_flow import handle_subscribe, handle_unsubscribe
from xmq.protocol.connect_terms import ConnectTerms
from xmq.protocol.outbound_qos import VIOLATION
from xmq.protocol.topic_aliases import InboundTopicAliases, OutboundTopicAliases

if TYPE_CHECKING:
    from xmq.core.broker import Broker

log = logging.getLogger("xmq.connection")

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
                hold_packet(self, packet)
        elif state == AWAIT_CONNECT:
            if isinstance(packet, Connect):
                on_connect(self, packet)
            else:
                refuse_connect(self, ReasonCode.PROTOCOL_ERROR, "the first packet must be CONNECT")

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
        reason_code = disconnect_reason_code(reason_code)
        closed = self.broker.stats.disconnects_by_reason
        closed[reason_code] = closed.get(reason_code, 0) + 1
        if log.isEnabledFor(logging.INFO):
            log.info(
                "closing %s (%s): 0x%02X %s", self.link.peer, self.client_id, reason_code, reason
            )
        if self.version == MQTT_5:
            reason_string = reason if self.problem_info else ""
            self.link.write(
                closing_disconnect(
                    reason_code, reason_string, server_reference, self.max_packet_size
                )
            )
        self._detach(publish_will=True)
        self.link.close()

    def take_over(self) -> None:
        """Another connection claimed this client id (0x8E to this one)."""
        self.close_with(ReasonCode.SESSION_TAKEN_OVER, "session taken over")

    def disconnected_before_connack(self) -> None:
        """A DISCONNECT during an enhanced-authentication exchange ends the attempt
        (``login_input.hold_packet``)."""
        self.state = next_state(self.state, ENDED)
        self.link.close()

    def disconnect_received(self, publish_will: bool) -> None:
        """The client sent DISCONNECT (``connected_packets.on_disconnect``): the session is
        detached, publishing its will when the client asked for it (0x04), and the link closed."""
        self.will_on_close = publish_will
        self._detach(publish_will)
        self.link.close()

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
            detach(broker, self.session, self, publish_will)

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


_HANDLERS: dict[type, Callable[[ClientConnection, Any], None]] = {
    Publish: on_publish,
    Puback: on_puback,
    Pubrec: on_pubrec,
    Pubrel: on_pubrel,
    Pubcomp: on_pubcomp,
    Subscribe: handle_subscribe,
    Unsubscribe: handle_unsubscribe,
    Pingreq: on_pingreq,
    Disconnect: on_disconnect,
    Auth: on_auth,
}

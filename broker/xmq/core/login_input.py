"""A connection's input while its login runs, and input the decoder refused.

A client may pipeline packets after its CONNECT: ``hold_packet`` keeps them until the CONNACK
(``core.login_flow`` replays them), at most ``MAX_HELD_PACKETS``; during an
enhanced-authentication exchange only AUTH and DISCONNECT may come, and ``accepts_pending``
bounds the bytes of an incomplete packet the network adapter keeps meanwhile.
``login_overdue`` tells the listeners' connect deadline whether the login still waits for the
client. ``protocol_error`` answers what the decoder refused: a CONNACK before the login, a
DISCONNECT after. The transitions stay the connection's (``core.connection_states``): these
read its state and call it. Compiled (``xmq.native_build``) with the connection and the
network adapter that call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.codec.errors import ProtocolError, UnsupportedProtocolVersion
from xmq.codec.packets import Disconnect, Packet
from xmq.codec.reason_codes import ReasonCode
from xmq.core.connection_states import AUTHENTICATING, AWAIT_CONNECT, CONNECTED
from xmq.core.login_flow import refuse_connect

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

MAX_HELD_PACKETS = 1024
"""Packets a client may pipeline after its CONNECT, held until the CONNACK."""
MAX_PENDING_BEFORE_CONNACK = 65_536
"""Bytes of an incomplete packet read during an enhanced-authentication exchange."""


def hold_packet(conn: ClientConnection, packet: Packet) -> None:
    """A packet sent before the CONNACK: held until the login is accepted, within bounds.

    With enhanced authentication only AUTH and DISCONNECT may come before the CONNACK
    [MQTT-3.1.2-30]: anything else is a protocol error, a DISCONNECT ends the attempt.
    Otherwise (a client may pipeline after its CONNECT) at most ``MAX_HELD_PACKETS`` are
    held: reading is paused meanwhile, so they came in the CONNECT's read.
    """
    terms = conn.terms
    if terms is not None and terms.authentication_method is not None:
        if isinstance(packet, Disconnect):
            conn.disconnected_before_connack()
        else:
            refuse_connect(conn, ReasonCode.PROTOCOL_ERROR, "only AUTH before the CONNACK")
        return
    held = conn.held_packets
    if held is None:
        held = conn.held_packets = []
    if len(held) >= MAX_HELD_PACKETS:
        refuse_connect(conn, ReasonCode.QUOTA_EXCEEDED, "too many packets before the CONNACK")
        return
    held.append(packet)


def accepts_pending(conn: ClientConnection, pending: int) -> bool:
    """Whether ``pending`` bytes of an incomplete packet may wait in the network adapter.

    During an enhanced-authentication exchange (reading is open for the client's AUTH)
    at most ``MAX_PENDING_BEFORE_CONNACK``: an AUTH is small, and nothing else may come.
    """
    if pending <= MAX_PENDING_BEFORE_CONNACK or conn.state == CONNECTED:
        return True
    terms = conn.terms
    return conn.state == AWAIT_CONNECT or terms is None or terms.authentication_method is None


def refuse_pending(conn: ClientConnection) -> None:
    """Too many bytes of an incomplete packet before the CONNACK (``accepts_pending``)."""
    refuse_connect(conn, ReasonCode.PACKET_TOO_LARGE, "too much data before the CONNACK")


def login_overdue(conn: ClientConnection) -> bool:
    """The connect deadline came: True while the login still waits for the client (its
    CONNECT, the password check, an AUTH of an exchange), not while its session is claimed
    cluster-wide (``CLAIMING``: bounded by the claim itself)."""
    return conn.state in (AWAIT_CONNECT, AUTHENTICATING)


def protocol_error(conn: ClientConnection, error: ProtocolError) -> None:
    """The decoder refused the input: answer with the error's reason code and close."""
    if isinstance(error, UnsupportedProtocolVersion):
        # Level 5 under a wrong protocol name is an MQTT 5 client: 0x84 in its own format
        # (MQTT-3.1.2-1); any other unknown level gets the 3.1.1 format (code 0x01).
        conn.version = 5 if error.protocol_version == 5 else 4
        refuse_connect(conn, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, str(error))
    elif conn.state == AWAIT_CONNECT:
        # A CONNECT that failed after its protocol level was read is answered in that
        # version's format (3.1.x: CONNACK with the mapped code); before that: closed.
        conn.version = error.protocol_version or 0
        refuse_connect(conn, error.reason_code, str(error))
    else:
        conn.close_with(error.reason_code, str(error))

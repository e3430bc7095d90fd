"""A connected client's PINGREQ and DISCONNECT, and the DISCONNECT the server closes with.

``core.connection`` dispatches a connected client's packets by type: PUBLISH and its
acknowledgements to ``core.publish_flow``, SUBSCRIBE and UNSUBSCRIBE to
``core.subscribe_flow``, AUTH to ``core.login_flow``, PINGREQ and DISCONNECT here. A
DISCONNECT's effect on the connection is the connection's own transition
(``ClientConnection.disconnect_received``); what is read here is what the packet asks for (a
new session expiry, the will). ``closing_disconnect`` builds the packet
``ClientConnection.close_with`` writes to an MQTT 5 client. Compiled (``xmq.native_build``)
with the connection, which calls it natively.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.codec.packets import MQTT_5, Disconnect, Pingreq
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import DISCONNECT_REASONS, ReasonCode
from xmq.codec.writer import PINGRESP_BYTES, encode
from xmq.core.node_caps import set_expiry

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

# CONNACK-only refusals said on a live connection (a failed re-authentication)
_AS_DISCONNECT: dict[int, int] = {
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: ReasonCode.NOT_AUTHORIZED,
    ReasonCode.BANNED: ReasonCode.NOT_AUTHORIZED,
    ReasonCode.BAD_AUTHENTICATION_METHOD: ReasonCode.NOT_AUTHORIZED,
}


def on_pingreq(conn: ClientConnection, packet: Pingreq) -> None:
    conn.link.write(PINGRESP_BYTES)


def on_disconnect(conn: ClientConnection, packet: Disconnect) -> None:
    """The client ends the connection: a session expiry it sets now is kept (unless its
    session was to end with the connection: a protocol error), its will goes out only with
    0x04 Disconnect with Will Message."""
    session = conn.session
    props = packet.properties
    if session is not None and props is not None and props.session_expiry_interval is not None:
        if session.expiry_s == 0 and props.session_expiry_interval != 0:
            conn.close_with(ReasonCode.PROTOCOL_ERROR, "session expiry set after 0")
            return
        set_expiry(conn.broker, session, props.session_expiry_interval)
    conn.disconnect_received(packet.reason_code == ReasonCode.DISCONNECT_WITH_WILL)


def disconnect_reason_code(reason_code: int) -> int:
    """The code a DISCONNECT says for a close with ``reason_code``.

    A DISCONNECT carries DISCONNECT reason codes only (MQTT-3.14.2-1): a refusal that CONNACK
    alone can say (a failed re-authentication's 0x86, 0x8C) is 0x87, any other 0x80.
    """
    if reason_code in DISCONNECT_REASONS:
        return reason_code
    return _AS_DISCONNECT.get(reason_code, ReasonCode.UNSPECIFIED_ERROR)


def closing_disconnect(
    reason_code: int, reason_string: str, server_reference: str | None, max_packet_size: int
) -> bytes:
    """The MQTT 5 DISCONNECT of a server closing a connection: ``reason_string`` (empty: the
    client asked for no problem information) and ``server_reference`` (with 0x9C Use another
    server) as properties, the Reason String left out beyond the client's Maximum Packet Size
    (MQTT-3.14.2-3)."""
    props = None
    if reason_string:
        props = Properties()
        props.reason_string = reason_string
    if server_reference:
        props = props or Properties()
        props.server_reference = server_reference
    data = encode(Disconnect(reason_code, props), MQTT_5)
    if len(data) > max_packet_size and props is not None and props.reason_string:
        props.reason_string = None
        data = encode(Disconnect(reason_code, props), MQTT_5)
    return data

"""The CONNACK a login answers with, encoded: accepting (``accepting_connack``) or refusing
(``refusing_connack``), in the client's protocol version.

An accepting MQTT 5 CONNACK that carries only the server's limits (no authentication data, no
response information, nothing the client asked for negotiated down) is encoded once per
``ServerLimits`` and reused; MQTT 3.1 / 3.1.1 ones are constants. ``core.login_flow`` writes
them; compiled (``xmq.native_build``) with it: one of them is written per connect.
"""

from __future__ import annotations

from typing import Final

from xmq.codec.packets import MQTT_5, Connack, Connect
from xmq.codec.properties import Properties
from xmq.codec.reason_codes import ReasonCode, connack_v311_code
from xmq.codec.writer import encode
from xmq.core.settings import CoreSettings
from xmq.protocol.connect_terms import (
    ConnectTerms,
    ServerLimits,
    connack_is_plain,
    connack_properties,
    server_properties,
)

# MQTT 3.1.1 has no CONNACK code for these: the connection is just closed (an invalid will
# topic is a malformed CONNECT there).
_CLOSE_SILENTLY_V311 = frozenset(
    (ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR, ReasonCode.TOPIC_NAME_INVALID)
)

# CONNACK accepting an MQTT 3.1 / 3.1.1 client, without and with a session present.
_CONNACK_V311 = b"\x20\x02\x00\x00"
_CONNACK_V311_PRESENT = b"\x20\x02\x01\x00"
# Encoded plain MQTT 5 CONNACKs by id(limits): (limits, without session, with session).
_PLAIN_CONNACKS: dict[int, tuple[ServerLimits, bytes, bytes]] = {}


def accepting_connack(
    version: int,
    terms: ConnectTerms,
    settings: CoreSettings,
    connect: Connect,
    auth: Properties | None,
    present: bool,
) -> bytes:
    """The CONNACK accepting ``connect`` (negotiated to ``terms``); ``auth``: the last step
    of an enhanced-authentication exchange (its method and data go back to the client)."""
    if version != MQTT_5:
        return _CONNACK_V311_PRESENT if present else _CONNACK_V311
    requested = None
    if connect.properties is not None:
        requested = connect.properties.session_expiry_interval
    limits = settings.limits
    if (
        auth is None
        and not terms.request_response_information
        and connack_is_plain(terms, requested)
    ):
        return plain_connack(limits, present)
    ack_props = connack_properties(terms, limits, requested)
    if auth is not None:
        ack_props.authentication_method = auth.authentication_method
        ack_props.authentication_data = auth.authentication_data
    if terms.request_response_information:
        ack_props.response_information = settings.response_information_prefix + terms.client_id
    return encode(Connack(present, 0, ack_props), MQTT_5)


def refusing_connack(
    version: int, reason_code: int, reason: str, problem_info: bool
) -> bytes | None:
    """The CONNACK refusing an attempt with ``reason_code`` (a Reason String only when the
    client allows problem information), or None: an MQTT 3.1.1 client is just closed when
    its version has no code for the reason, and a client whose version is unknown."""
    if version == MQTT_5:
        props = None
        if problem_info and reason:
            props = Properties()
            props.reason_string = reason
        return encode(Connack(False, reason_code, props), MQTT_5)
    if version in (3, 4) and reason_code not in _CLOSE_SILENTLY_V311:
        return encode(Connack(False, connack_v311_code(reason_code)), version)
    return None


def plain_connack(limits: ServerLimits, present: bool) -> bytes:
    """The MQTT 5 CONNACK (success) with only the server's limits, encoded once per limits;
    the last limits asked are compared first (one ``ServerLimits`` per broker: no boxed id
    nor dict lookup per connect)."""
    last = _LAST_CONNACKS
    if last.limits is limits:
        return last.present if present else last.absent
    entry = _PLAIN_CONNACKS.get(id(limits))
    if entry is None or entry[0] is not limits:  # the entry holds ``limits``: no id reuse
        if len(_PLAIN_CONNACKS) >= 16:
            _PLAIN_CONNACKS.clear()
        props = server_properties(limits)
        entry = (
            limits,
            encode(Connack(False, 0, props), MQTT_5),
            encode(Connack(True, 0, props), MQTT_5),
        )
        _PLAIN_CONNACKS[id(limits)] = entry
    last.limits = limits
    last.absent = entry[1]
    last.present = entry[2]
    return entry[2] if present else entry[1]


class _LastConnacks:
    """The limits ``plain_connack`` was last asked for and their two CONNACKs."""

    def __init__(self) -> None:
        self.limits: ServerLimits | None = None
        self.absent = b""
        self.present = b""


_LAST_CONNACKS: Final = _LastConnacks()

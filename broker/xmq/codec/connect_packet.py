"""The CONNECT packet's records: ``Connect`` and its ``Will`` (re-exported by ``codec.packets``).

Apart from the other packet records because this module is compiled (``xmq.native_build``):
one ``Connect`` is built per connection attempt and read by the login (``protocol.connect_terms``,
``core.login_flow``). As a dataclass in ``codec.packets`` (interpreted) its ``__init__`` was
code that ``dataclasses`` generates at import, run by the interpreter (~2,000 instructions per
connect), and every read of a field a generic attribute lookup. ``Connect`` is written by hand
(fields, ``__eq__``, ``__repr__``, as the dataclass had them), so that the compiled decoder
builds it through a C call and the compiled login reads its fields natively.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xmq.codec.properties import Properties

CONNECT_TYPE = 1
"""``PacketType.CONNECT`` (``codec.packets`` imports this module: no import back)."""


@dataclass(slots=True)
class Will:
    """The will message carried in CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None


class Connect:
    """CONNECT (MQTT 3.1, 3.1.1 and 5.0)."""

    packet_type: ClassVar[int] = CONNECT_TYPE

    def __init__(
        self,
        protocol_name: str = "MQTT",
        protocol_version: int = 5,
        clean_start: bool = True,
        keep_alive: int = 0,
        client_id: str = "",
        properties: Properties | None = None,
        will: Will | None = None,
        username: str | None = None,
        password: bytes | None = None,
    ) -> None:
        self.protocol_name = protocol_name
        self.protocol_version = protocol_version
        self.clean_start = clean_start
        self.keep_alive = keep_alive
        self.client_id = client_id
        self.properties = properties
        self.will = will
        self.username = username
        self.password = password

    def _fields(self) -> tuple[object, ...]:
        return (
            self.protocol_name,
            self.protocol_version,
            self.clean_start,
            self.keep_alive,
            self.client_id,
            self.properties,
            self.will,
            self.username,
            self.password,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Connect):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return (
            f"Connect(protocol_name={self.protocol_name!r}, "
            f"protocol_version={self.protocol_version!r}, clean_start={self.clean_start!r}, "
            f"keep_alive={self.keep_alive!r}, client_id={self.client_id!r}, "
            f"properties={self.properties!r}, will={self.will!r}, "
            f"username={self.username!r}, password={self.password!r})"
        )

"""In-process stand-ins for the sockets of the micro-benchmarks (``p2p_bench``, ``link_bench``).

``ClientTransport`` keeps a client connection's last write (the bench reads the PUBLISH's packet
id from it); ``LinkTransport`` keeps what one direction of a node link writes until the bench
hands it to the other node; ``connect_client`` makes a real ``MqttClientProtocol`` on a
``ClientTransport`` and logs it in (MQTT 5, clean start).
"""

from __future__ import annotations

import asyncio
from typing import Any

from xmq.codec.packets import Connect
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol

V5 = 5


class ClientTransport:
    """The few transport methods a client protocol calls; keeps the last write."""

    __slots__ = ("last", "writes")

    def __init__(self) -> None:
        self.last = b""
        self.writes = 0

    def write(self, data: Any) -> None:
        self.last = data
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        pass


class LinkTransport:
    """One direction of a node link: keeps what the link writes until the bench moves it."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.pending.append(bytes(data))

    def writelines(self, data: list[bytes]) -> None:
        self.pending.append(b"".join(data))  # one send on a socket

    def take(self) -> bytes:
        data = b"".join(self.pending)
        self.pending.clear()
        return data

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0  # everything written is taken at once: never backed up

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


async def connect_client(
    broker: Broker, scheduler: FlushScheduler, client_id: str
) -> tuple[MqttClientProtocol, ClientTransport]:
    """A logged-in client of ``broker`` (the login's turns run before it returns)."""
    proto = MqttClientProtocol(broker, AnonymousAuthenticator(), AllowAll(), scheduler, 1 << 20)
    transport = ClientTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    proto.data_received(encode(Connect(client_id=client_id), V5))
    for _ in range(3):
        await asyncio.sleep(0)
    return proto, transport

"""A blocking raw-socket MQTT client built on xmq.codec, for exact-byte protocol tests."""

from __future__ import annotations

import contextlib
import socket
import time

from xmq.codec.packets import (
    MQTT_5,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Will,
)
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode


class RawClient:
    """Sends hand-built bytes or packets and reads the broker's packets back."""

    def __init__(
        self, port: int, host: str = "127.0.0.1", version: int = MQTT_5, source: str = ""
    ) -> None:
        """``source``: the local address to connect from (another 127.0.0.x, say)."""
        address = (source, 0) if source else None
        self.sock = socket.create_connection((host, port), timeout=10, source_address=address)
        self.version = version
        self.reader = PacketReader(protocol_version=version)
        self._pending: list[Packet] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_packet(self, packet: Packet) -> None:
        self.sock.sendall(encode(packet, self.version))

    def connect(
        self,
        client_id: str,
        keep_alive: int = 60,
        clean_start: bool = True,
        will: tuple[str, bytes] | None = None,
        properties: Properties | None = None,
    ) -> Connack:
        packet = Connect(
            protocol_name="MQTT" if self.version >= 4 else "MQIsdp",
            protocol_version=self.version,
            clean_start=clean_start,
            keep_alive=keep_alive,
            client_id=client_id,
            properties=properties,
            will=Will(will[0], will[1], 1) if will else None,
        )
        self.send_packet(packet)
        ack = self.read_packet()
        assert isinstance(ack, Connack), ack
        return ack

    def read_packet(self, timeout: float = 10.0) -> Packet | None:
        """The next packet, or None when the broker closed the connection."""
        deadline = time.monotonic() + timeout
        while not self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no packet from the broker")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self._pending.extend(self.reader.feed(data))
        return self._pending.pop(0)

    def read_nothing(self, timeout: float = 0.3) -> bool:
        """True when no packet arrives within ``timeout`` (and the connection stays open)."""
        try:
            packet = self.read_packet(timeout)
        except TimeoutError:
            return True
        if packet is not None:
            self._pending.insert(0, packet)
        return False

    def read_until_closed(self, timeout: float = 10.0) -> list[Packet]:
        """Every packet until the broker closes the connection."""
        packets: list[Packet] = []
        while True:
            packet = self.read_packet(timeout)
            if packet is None:
                return packets
            packets.append(packet)

    def close(self) -> None:
        self.sock.close()


def connected(
    port: int, client_id: str, version: int = MQTT_5, properties: Properties | None = None
) -> RawClient:
    """A raw client whose CONNECT was accepted."""
    raw = RawClient(port, version=version)
    ack = raw.connect(client_id, properties=properties)
    assert ack.reason_code == 0, ack
    return raw


def receive_qos2(raw: RawClient, packet_id: int) -> None:
    """Complete an incoming QoS 2 delivery: PUBREC, the server's PUBREL, PUBCOMP."""
    raw.send_packet(Pubrec(packet_id))
    assert raw.read_packet() == Pubrel(packet_id)
    raw.send_packet(Pubcomp(packet_id))


def end_session(raw: RawClient) -> None:
    """DISCONNECT with Session Expiry 0 (MQTT 5: the session ends; skipped if the socket is
    gone already) and close."""
    with contextlib.suppress(OSError):
        raw.send_packet(Disconnect(0, Properties(session_expiry_interval=0)))
    raw.close()


def closing_reason(raw: RawClient) -> int | None:
    """The DISCONNECT reason the broker sent before closing (None: closed silently)."""
    packets = raw.read_until_closed(timeout=10)
    disconnects = [p for p in packets if isinstance(p, Disconnect)]
    return disconnects[-1].reason_code if disconnects else None


def disconnect_reason_for(port: int, client_id: str, data: bytes) -> int | None:
    """Connect, send ``data``: the DISCONNECT reason the broker closed with (None: silently)."""
    raw = connected(port, client_id)
    try:
        raw.send(data)
        return closing_reason(raw)
    finally:
        raw.close()


def subscribed(raw: RawClient, topic_filter: str, qos: int = 1, packet_id: int = 1) -> None:
    """SUBSCRIBE to one filter and check the SUBACK grants ``qos``."""
    raw.send_packet(Subscribe(packet_id, [SubscriptionRequest(topic_filter, qos)]))
    ack = raw.read_packet()
    assert isinstance(ack, Suback) and ack.reason_codes == [qos], ack


def next_publish(raw: RawClient, timeout: float = 10.0) -> Publish:
    """The next packet, which must be a PUBLISH."""
    packet = raw.read_packet(timeout)
    assert isinstance(packet, Publish), packet
    return packet


def resumable(
    port: int, client_id: str, clean_start: bool, version: int = MQTT_5
) -> tuple[RawClient, Connack]:
    """A raw client whose session outlives the connection (MQTT 5: expiry 60 s)."""
    raw = RawClient(port, version=version)
    expiry = Properties(session_expiry_interval=60) if version == MQTT_5 else None
    ack = raw.connect(client_id, clean_start=clean_start, properties=expiry)
    assert ack.reason_code == 0, ack
    return raw, ack

"""A small synchronous wrapper over paho-mqtt for integration tests."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

V311 = mqtt.MQTTv311
V5 = mqtt.MQTTv5


@dataclass
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Any = None
    dup: bool = False


@dataclass
class ConnectResult:
    reason: int
    session_present: bool
    properties: Any = None


@dataclass
class Disconnected:
    reason: int
    properties: Any = None
    events: list[int] = field(default_factory=list)


class PahoClient:
    """A paho client running its network loop in a thread; results via queues."""

    def __init__(
        self,
        port: int,
        client_id: str = "",
        version: MQTTProtocolVersion = V5,
        host: str = "127.0.0.1",
        auto_ack: bool = True,
        transport: Literal["tcp", "websockets"] = "tcp",
    ) -> None:
        self.port = port
        self.host = host
        self.version = version
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=version,
            clean_session=None if version == V5 else True,
            reconnect_on_failure=False,
            manual_ack=not auto_ack,
            transport=transport,  # "websockets" for MQTT over WebSocket
        )
        self.messages: queue.Queue[Received] = queue.Queue()
        self.connacks: queue.Queue[ConnectResult] = queue.Queue()
        self.subacks: queue.Queue[list[int]] = queue.Queue()
        self.unsubacks: queue.Queue[list[int]] = queue.Queue()
        self.disconnects: queue.Queue[Disconnected] = queue.Queue()
        self.published: dict[int, threading.Event] = {}
        self.pub_reasons: dict[int, int] = {}
        self._lock = threading.Lock()
        client = self.client
        client.on_connect = self._on_connect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        client.on_unsubscribe = self._on_unsubscribe
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish

    # -- callbacks (paho's thread) ----------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.connacks.put(ConnectResult(_code(reason), bool(flags.session_present), props))

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        props = getattr(msg, "properties", None)
        self.messages.put(
            Received(msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain), props, msg.dup)
        )

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any, props: Any) -> None:
        self.subacks.put([_code(r) for r in reasons])

    def _on_unsubscribe(
        self, client: Any, userdata: Any, mid: int, reasons: Any, props: Any
    ) -> None:
        self.unsubacks.put([_code(r) for r in reasons] if reasons else [])

    def _on_disconnect(
        self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        self.disconnects.put(Disconnected(_code(reason), props))

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        with self._lock:
            self.pub_reasons[mid] = _code(reason)
            event = self.published.setdefault(mid, threading.Event())
        event.set()

    # -- actions ----------------------------------------------------------------------------

    def connect(
        self,
        clean_start: bool = True,
        keepalive: int = 60,
        properties: Properties | None = None,
        timeout: float = 10.0,
    ) -> ConnectResult:
        if self.version == V5:
            self.client.connect(
                self.host, self.port, keepalive, clean_start=clean_start, properties=properties
            )
        else:
            self.client._clean_session = clean_start
            self.client.connect(self.host, self.port, keepalive)
        self.client.loop_start()
        return self.connacks.get(timeout=timeout)

    def subscribe(
        self,
        topic_filter: str,
        qos: int = 1,
        options: SubscribeOptions | None = None,
        properties: Properties | None = None,
        timeout: float = 10.0,
    ) -> list[int]:
        if self.version == V5:
            opts = options or SubscribeOptions(qos=qos)
            self.client.subscribe(topic_filter, options=opts, properties=properties)
        else:
            self.client.subscribe(topic_filter, qos)
        return self.subacks.get(timeout=timeout)

    def unsubscribe(self, topic_filter: str, timeout: float = 10.0) -> list[int]:
        self.client.unsubscribe(topic_filter)
        return self.unsubacks.get(timeout=timeout)

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 1,
        retain: bool = False,
        properties: Properties | None = None,
        wait: bool = True,
        timeout: float = 10.0,
    ) -> int:
        """Publish; with ``wait``, block until acknowledged and return the ack reason code."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if not wait or qos == 0:
            return 0
        with self._lock:
            event = self.published.setdefault(info.mid, threading.Event())
        if not event.wait(timeout):
            raise TimeoutError(f"no acknowledgement for {topic}")
        return self.pub_reasons.get(info.mid, 0)

    def expect(self, count: int, timeout: float = 10.0) -> list[Received]:
        """Wait for ``count`` messages."""
        got: list[Received] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"expected {count} messages, got {len(got)}: {got}")
            got.append(self.messages.get(timeout=remaining))
        return got

    def expect_none(self, wait: float = 0.5) -> None:
        try:
            extra = self.messages.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message {extra}")

    def disconnect(self, properties: Properties | None = None, reason: int = 0) -> None:
        if self.version == V5:
            self.client.disconnect(
                reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=reason),
                properties=properties,
            )
        else:
            self.client.disconnect()
        self.client.loop_stop()

    def drop(self) -> None:
        """Close the socket without DISCONNECT (network loss). The network thread stops
        first: closed under it, paho reconnects on its own (with the same clean start), and
        a clean start ends the session on the broker, its delayed will published at once."""
        sock = self.client.socket()
        self.client.loop_stop()
        if sock is not None:
            sock.close()

    def close(self) -> None:
        try:
            self.client.loop_stop()
        finally:
            sock = self.client.socket()
            if sock is not None:
                sock.close()


def reason_value(reason: Any) -> int:
    """A paho reason code (``ReasonCode``, int) as its number."""
    return _code(reason)


def _code(reason: Any) -> int:
    if isinstance(reason, int):
        return reason
    value = getattr(reason, "value", None)
    if isinstance(value, int):
        return value
    return int(reason)


def props(packet_type: int, **values: Any) -> Properties:
    """Build paho properties: ``props(PacketTypes.CONNECT, SessionExpiryInterval=60)``."""
    built = Properties(packet_type)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(built, name, value)
    return built

"""Persistent QoS 1 / QoS 2 load over real paho-mqtt clients that survives node faults, and an
independent count of every acknowledged message at every subscriber.

Each client runs its own thread and its own paho network loop, keeps one paho ``Client`` for its
whole life (so paho's QoS 2 receive state — the packet ids it holds until PUBREL — survives a
reconnect, as it does in an application) and reconnects with ``clean_start`` off to the next
node in turn when its connection drops or its CONNECT is not answered in time. Publishers send
``<client id>:<n>`` to their QoS's topic; a message counts as acknowledged when its PUBACK /
PUBREC carries a success reason (0x10 "no matching subscribers" included: it is a loss if the
message never arrives). Every subscriber of that QoS must get every acknowledged message.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

CONNECT_TIMEOUT_S = 4.0
KEEPALIVE_S = 3
MAX_INFLIGHT = 20


class FaultClient(threading.Thread):
    """One persistent session (publisher or subscriber) that reconnects across the nodes."""

    def __init__(
        self, client_id: str, ports: list[int], first: int, qos: int, topic: str, publisher: bool
    ) -> None:
        super().__init__(name=client_id, daemon=True)
        self.client_id = client_id
        self.ports = ports
        self.turn = first
        self.qos = qos
        self.topic = topic
        self.publisher = publisher
        self.state = "down"
        self.connected_once = False
        self.connects = 0
        self.sessions_lost = 0
        self.refusals: Counter[int] = Counter()
        self.disconnect_reasons: Counter[int] = Counter()
        self.rate = 0.0
        self.publishing = threading.Event()
        self.done = threading.Event()
        self.sent = 0
        self.pending: dict[int, str] = {}
        self.acked: list[str] = []
        self.ack_reasons: Counter[int] = Counter()
        self.received: list[tuple[str, int, bool]] = []
        self._lock = threading.Lock()
        self._since = 0.0
        client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=mqtt.MQTTv5,
            reconnect_on_failure=False,
        )
        client.max_inflight_messages_set(MAX_INFLIGHT)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        self.client = client

    # -- paho callbacks (this thread) -------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _: Any, flags: Any, reason: Any, __: Any) -> None:
        if reason.is_failure:
            self.refusals[reason.value] += 1
            self.state = "down"
            return
        self.state = "up"
        self.connects += 1
        if not flags.session_present:
            if self.connected_once:
                self.sessions_lost += 1
            if not self.publisher:
                client.subscribe(self.topic, qos=self.qos)
        self.connected_once = True

    def _on_disconnect(self, _: mqtt.Client, __: Any, ___: Any, reason: Any, ____: Any) -> None:
        self.disconnect_reasons[reason.value] += 1
        self.state = "down"

    def _on_message(self, _: mqtt.Client, __: Any, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.received.append((message.payload.decode(), message.qos, bool(message.dup)))

    def _on_publish(self, _: mqtt.Client, __: Any, mid: int, reason: Any, ___: Any) -> None:
        payload = self.pending.pop(mid, None)
        if payload is None:
            return
        self.ack_reasons[reason.value] += 1
        if not reason.is_failure:
            with self._lock:
                self.acked.append(payload)

    # -- the thread -------------------------------------------------------------------------

    def run(self) -> None:
        client = self.client
        next_publish = time.monotonic()
        while not self.done.is_set():
            now = time.monotonic()
            if self.state == "down":
                self._dial()
                continue
            if self.state == "connecting" and now - self._since > CONNECT_TIMEOUT_S:
                client.disconnect()  # a node that accepts but never answers (paused)
                self.state = "down"
                continue
            rc = client.loop(timeout=0.02)
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self.state = "down"
                continue
            if self.publisher and self.state == "up" and self.publishing.is_set():
                while now >= next_publish and len(self.pending) < MAX_INFLIGHT:
                    self._publish_next()
                    next_publish += 1.0 / self.rate
                next_publish = max(next_publish, now - 1.0)
        client.disconnect()

    def _dial(self) -> None:
        port = self.ports[self.turn % len(self.ports)]
        self.turn += 1
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.SessionExpiryInterval = 3600
        try:
            self.state = "connecting"
            self._since = time.monotonic()
            self.client.connect(
                "127.0.0.1", port, keepalive=KEEPALIVE_S, clean_start=False, properties=properties
            )
        except OSError:
            self.state = "down"
            time.sleep(0.2)

    def _publish_next(self) -> None:
        self.sent += 1
        payload = f"{self.client_id}:{self.sent}"
        info = self.client.publish(self.topic, payload.encode(), qos=self.qos)
        self.pending[info.mid] = payload

    def payloads(self) -> list[tuple[str, int, bool]]:
        with self._lock:
            return list(self.received)

    def acknowledged(self) -> list[str]:
        with self._lock:
            return list(self.acked)


@dataclass
class FaultCount:
    acknowledged: int = 0
    missing: int = 0
    qos2_duplicates: int = 0
    qos1_duplicates: int = 0
    sessions_lost: int = 0
    refusals: Counter[int] = field(default_factory=Counter)
    ack_reasons: Counter[int] = field(default_factory=Counter)
    missing_examples: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"acknowledged {self.acknowledged} (reasons {dict(self.ack_reasons)}), "
            f"missing {self.missing} {self.missing_examples[:5]}, "
            f"QoS 2 duplicates {self.qos2_duplicates}, QoS 1 duplicates {self.qos1_duplicates}, "
            f"sessions lost {self.sessions_lost}, CONNECT refusals {dict(self.refusals)}"
        )


class FaultLoad:
    """Per node and QoS: ``subscribers`` persistent subscribers and one publisher
    (``rate`` msg/s)."""

    def __init__(
        self, ports: list[int], run_id: str, rate: float = 15.0, subscribers: int = 1
    ) -> None:
        self.clients: list[FaultClient] = []
        self.subscribers: list[FaultClient] = []
        self.publishers: list[FaultClient] = []
        for node in range(len(ports)):
            for qos in (1, 2):
                topic = f"fault/{run_id}/q{qos}"
                for n in range(subscribers):
                    self.subscribers.append(
                        FaultClient(f"s{qos}-{node}-{n}-{run_id}", ports, node, qos, topic, False)
                    )
                pub = FaultClient(f"p{qos}-{node}-{run_id}", ports, node, qos, topic, True)
                pub.rate = rate
                self.publishers.append(pub)
        self.clients = self.subscribers + self.publishers

    def start(self, timeout: float = 20.0) -> None:
        """Connect everybody (subscribers first), then start publishing."""
        for client in self.subscribers:
            client.start()
        self._wait(lambda: all(c.connects for c in self.subscribers), timeout, "subscribers")
        time.sleep(1.0)  # their routes reach every node
        for client in self.publishers:
            client.start()
        self._wait(lambda: all(c.connects for c in self.publishers), timeout, "publishers")
        for client in self.publishers:
            client.publishing.set()

    def stop_publishing(self, settle_s: float = 30.0) -> None:
        """Stop new publishes; wait until nothing is in flight (acks come or never will)."""
        for client in self.publishers:
            client.publishing.clear()
        self._wait(lambda: not any(c.pending for c in self.publishers), settle_s, "acks")

    def count(self, timeout: float = 40.0) -> FaultCount:
        """Wait until every acknowledged message reached its subscribers (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self._count()
            if result.missing == 0 or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def close(self) -> None:
        for client in self.clients:
            client.done.set()
        for client in self.clients:
            if client.is_alive():
                client.join(timeout=5)

    def _count(self) -> FaultCount:
        result = FaultCount()
        acked = {1: set[str](), 2: set[str]()}
        for pub in self.publishers:
            got = pub.acknowledged()
            acked[pub.qos].update(got)
            result.acknowledged += len(got)
            result.ack_reasons.update(pub.ack_reasons)
        for client in self.clients:
            result.sessions_lost += client.sessions_lost
            result.refusals.update(client.refusals)
        for sub in self.subscribers:
            seen = Counter(payload for payload, _, _ in sub.payloads())
            for payload in acked[sub.qos]:
                if payload not in seen:
                    result.missing += 1
                    result.missing_examples.append(f"{sub.client_id}<-{payload}")
            extra = sum(n - 1 for n in seen.values() if n > 1)
            if sub.qos == 2:
                result.qos2_duplicates += extra
            else:
                result.qos1_duplicates += extra
        return result

    @staticmethod
    def _wait(predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.05)

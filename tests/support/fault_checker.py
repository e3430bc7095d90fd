"""An independent checker for fault-injection tests: every acknowledged message is counted at
its subscriber.

Real paho-mqtt clients with persistent sessions roam over the cluster's nodes: each
``RoamingClient`` reconnects on its own (next node, backoff) whenever its connection breaks and
resumes its session (paho re-sends its unacknowledged PUBLISH / PUBREL itself; a PUBREL stays a
PUBREL across refused reconnects: ``keep_owed_pubrels``). Publishers send
payloads ``<stream>:<seq>`` and record in the shared :class:`DeliveryLedger` only the sequence
numbers they got a *successful* PUBACK (QoS 1) or PUBCOMP (QoS 2) for; subscribers record every
copy that arrives. Several subscribers may share a topic (and several publishers): each of them
must get every message acknowledged on it. ``DeliveryLedger.report`` then says what the cluster
lost (acknowledged, never delivered), what it delivered twice (QoS 2: must be 0; QoS 1:
counted) and how many acks carried an error reason (a failed write must never be acknowledged
as a success).

Typical use (see ``tests/integration/cluster/test_redis_faults.py``)::

    ledger = DeliveryLedger()
    subs = [LedgerSubscriber(ledger, ports, f"s{n}", f"t/{uid}/{n}", qos=2) for n in ...]
    pubs = [LedgerPublisher(ledger, ports, f"p{n}", f"t/{uid}/{n}", qos=2) for n in ...]
    load = PublishLoad(pubs, rate=200)          # a thread publishing round robin
    load.start(); fault(); load.stop()
    report = ledger.wait_delivered(timeout=30)  # every acknowledged message arrived, or not
    assert report.missing == 0 and report.qos2_duplicates == 0, report
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.paho_client import reason_value as _code
from xmq.bench.survivability_faults import pause as pause_process

__all__ = ["pause_process"]  # SIGSTOP a pid for a while, then SIGCONT (the bench's injector)

V311 = mqtt.MQTTv311
V5 = mqtt.MQTTv5
PROBE = b"probe"
"""Payload of warm-up messages (QoS 0, not counted)."""


@dataclass(frozen=True)
class LedgerReport:
    acked: int
    """Distinct messages that got a successful PUBACK / PUBCOMP."""
    refused: int
    """Acknowledgements with an error reason code (the message was not stored)."""
    received: int
    """Distinct messages that reached their subscriber (counted per subscriber)."""
    missing: int
    """Acknowledged and never received (counted per subscriber of the topic)."""
    qos2_duplicates: int
    """Extra copies of QoS 2 messages (must be 0)."""
    qos1_duplicates: int
    """Extra copies of QoS 1 messages (allowed, counted)."""
    missing_sample: tuple[tuple[str, str, int], ...] = ()
    """(subscriber, stream, sequence number) of a few missing messages."""
    qos2_duplicate_sample: tuple[tuple[str, str, int], ...] = ()
    """(subscriber, stream, sequence number) of a few QoS 2 messages that came twice."""
    qos2_duplicate_streams: frozenset[str] = frozenset()
    """Every publisher stream with a QoS 2 message that came twice."""

    def __str__(self) -> str:
        return (
            f"acked {self.acked}, refused {self.refused}, received {self.received}, "
            f"missing {self.missing} {list(self.missing_sample)}, "
            f"QoS 2 duplicates {self.qos2_duplicates} {list(self.qos2_duplicate_sample)}, "
            f"QoS 1 duplicates {self.qos1_duplicates}"
        )


class DeliveryLedger:
    """What publishers got acknowledged and what subscribers received (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked: dict[str, set[int]] = {}
        self.refused: dict[str, set[int]] = {}
        self.qos: dict[str, int] = {}
        self.topic: dict[str, str] = {}  # stream -> its topic
        self.readers: dict[str, list[str]] = {}  # topic -> its subscribers
        self.copies: dict[tuple[str, str], Counter[int]] = {}  # (subscriber, stream) -> copies
        self.reasons: dict[str, Counter[int]] = {}  # stream -> its acks' reason codes

    def stream(self, name: str, qos: int, topic: str) -> None:
        """A publisher's stream of messages on ``topic``."""
        with self._lock:
            self.qos[name] = qos
            self.topic[name] = topic
            self.acked.setdefault(name, set())
            self.refused.setdefault(name, set())

    def reader(self, name: str, topic: str) -> None:
        """A subscriber of ``topic``: it must get every message acknowledged on it."""
        with self._lock:
            self.readers.setdefault(topic, []).append(name)

    def ack(self, stream: str, seq: int, reason: int) -> None:
        with self._lock:
            self.reasons.setdefault(stream, Counter())[reason] += 1
            if reason < 0x80:
                self.acked[stream].add(seq)
            else:
                self.refused[stream].add(seq)

    def receive(self, reader: str, payload: bytes) -> None:
        stream, _, seq = payload.decode().rpartition(":")
        with self._lock:
            if stream in self.qos:
                self.copies.setdefault((reader, stream), Counter())[int(seq)] += 1

    def report(self) -> LedgerReport:
        with self._lock:
            acked = received = missing = dup1 = dup2 = refused = 0
            sample: list[tuple[str, str, int]] = []
            twice: list[tuple[str, str, int]] = []
            twice_streams: set[str] = set()
            for stream, seqs in self.acked.items():
                acked += len(seqs)
                refused += len(self.refused[stream] - seqs)
                # a topic nobody reads: every acknowledged message on it is missing
                for reader in self.readers.get(self.topic[stream]) or ["(no subscriber)"]:
                    copies = self.copies.get((reader, stream), Counter())
                    received += len(copies)
                    lost = sorted(seqs - copies.keys())
                    missing += len(lost)
                    sample += [(reader, stream, seq) for seq in lost[: 5 - len(sample)]]
                    extra = sum(count - 1 for count in copies.values())
                    if self.qos[stream] == 2:
                        dup2 += extra
                        again = sorted(seq for seq, count in copies.items() if count > 1)
                        twice += [(reader, stream, seq) for seq in again[: 5 - len(twice)]]
                        if again:
                            twice_streams.add(stream)
                    else:
                        dup1 += extra
            return LedgerReport(
                acked,
                refused,
                received,
                missing,
                dup2,
                dup1,
                tuple(sample),
                tuple(twice),
                frozenset(twice_streams),
            )

    def reason_totals(self) -> dict[int, int]:
        """How many acks of every stream carried each reason code (0x10: no subscriber)."""
        with self._lock:
            totals: Counter[int] = Counter()
            for reasons in self.reasons.values():
                totals.update(reasons)
            return dict(sorted(totals.items()))

    def lossy_streams(self) -> dict[str, dict[str, int]]:
        """topic -> {stream: how many acknowledged messages of it some reader lacks}."""
        with self._lock:
            lossy: dict[str, dict[str, int]] = {}
            for stream, seqs in self.acked.items():
                topic = self.topic[stream]
                for reader in self.readers.get(topic) or ["(no subscriber)"]:
                    lost = len(seqs - self.copies.get((reader, stream), Counter()).keys())
                    if lost:
                        lossy.setdefault(topic, {})[stream] = lost
            return lossy

    def wait_delivered(self, timeout: float, settle: float = 1.0) -> LedgerReport:
        """Wait until every acknowledged message arrived (or ``timeout``), then ``settle``
        seconds more for late duplicates; return the final report."""
        deadline = time.monotonic() + timeout
        while self.report().missing and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(settle)
        return self.report()


def keep_owed_pubrels(client: mqtt.Client) -> None:
    """Before each (re)connect: a QoS 2 message whose PUBREL paho sent stays a PUBREL to send
    again. paho-mqtt 2.2 marks such a message "resend PUBREL" when it reconnects and sends the
    PUBREL after the CONNACK; a connect that gets no successful CONNACK (refused 0x88 while the
    nodes rejoin, or cut) leaves that mark, and the next reconnect turns it into "publish":
    paho then sends the *PUBLISH* again, after its PUBREL — which the sender must never do
    (MQTT-4.3.3: not re-sent once its PUBREL is sent), and which a broker must take for a new
    message (the receiver released the id at the PUBREL): a QoS 2 duplicate made by the client.
    Put back to "waiting for PUBCOMP", paho's reconnect marks it "resend PUBREL" again."""
    with client._out_message_mutex:
        for message in client._out_messages.values():
            if message.qos == 2 and message.state == mqtt.mqtt_ms_resend_pubrel:
                message.state = mqtt.mqtt_ms_wait_for_pubcomp


class RoamingClient:
    """A paho client with a persistent session that reconnects to the next node on its own."""

    def __init__(
        self,
        ports: Sequence[int],
        client_id: str,
        first: int = 0,
        version: MQTTProtocolVersion = V5,
        session_expiry: int = 600,
        host: str = "127.0.0.1",
        keepalive: int = 30,
        hosts: Sequence[str] = (),
    ) -> None:
        """``keepalive`` also bounds the wait for a CONNACK (paho closes a connection that
        received nothing for that long): a short one moves the client off a paused node.
        ``hosts``: each node's address, parallel to ``ports`` (default: ``host`` for all)."""
        self.ports = list(ports)
        self.hosts = list(hosts) or [host] * len(self.ports)
        self.client_id = client_id
        self.keepalive = keepalive
        self.index = first % len(self.ports)
        self.host = host
        self.version = version
        self.session_expiry = session_expiry
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=version,
            clean_session=None if version == V5 else False,
            reconnect_on_failure=False,
        )
        self.client.max_inflight_messages_set(100)
        self.client.max_queued_messages_set(0)
        self.connected = threading.Event()
        self.connects = 0
        self.session_lost = 0
        self.disconnect_reasons: Counter[int] = Counter()
        self.connected_port = 0  # the node port of the current connection (0: none)
        self.connect_log: list[tuple[int, int]] = []  # (port, CONNACK reason) of each CONNACK
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"roam-{client_id}", daemon=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect

    def start(self, timeout: float = 15.0) -> None:
        self._thread.start()
        if not self.connected.wait(timeout):
            raise TimeoutError(f"{self.client_id!r} did not connect")

    def stop(self) -> None:
        self._stop.set()
        try:
            self.client.disconnect()
        finally:
            if self._thread.is_alive():
                self._thread.join(10)

    def drop(self) -> None:
        """Cut the connection without DISCONNECT (a network loss): the client reconnects, to
        the next node, and resumes its session there."""
        sock = self.client.socket()
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def on_session(self, present: bool) -> None:
        """Called after each CONNACK (paho's thread)."""

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        port = self.ports[self.index]
        self.connect_log.append((port, _code(reason)))
        if _code(reason) != 0:
            return
        self.connected_port = port
        self.connects += 1
        if self.connects > 1 and not flags.session_present:
            self.session_lost += 1
        self.on_session(bool(flags.session_present))
        self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, _: Any) -> None:
        self.disconnect_reasons[_code(reason)] += 1
        self.connected_port = 0
        self.connected.clear()

    def _connect(self) -> None:
        port, host = self.ports[self.index], self.hosts[self.index]
        keep_owed_pubrels(self.client)
        if self.version == V5:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = self.session_expiry
            self.client.connect(
                host,
                port,
                self.keepalive,
                clean_start=self.connects == 0,
                properties=properties,
            )
        else:
            self.client._clean_session = self.connects == 0
            self.client.connect(host, port, self.keepalive)

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                self._connect()
                self.client.loop_forever(retry_first_connection=False)
            except OSError:
                pass
            if self._stop.is_set():
                return
            self.connected.clear()
            self.index = (self.index + 1) % len(self.ports)  # the next node
            self._stop.wait(delay)
            delay = min(delay * 2, 1.0) if not self.connects else 0.1


class LedgerSubscriber(RoamingClient):
    """Subscribes ``topic`` once (the session keeps it) and records every copy received."""

    def __init__(
        self,
        ledger: DeliveryLedger,
        ports: Sequence[int],
        client_id: str,
        topic: str,
        qos: int,
        **options: Any,
    ) -> None:
        super().__init__(ports, client_id, **options)
        self.ledger = ledger
        self.topic = topic
        self.qos = qos
        ledger.reader(client_id, topic)
        self.subscribed = threading.Event()
        self.probed: set[bytes] = set()  # warm-up probes arrived (their publishers' routes)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *args: self.subscribed.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        payload = bytes(msg.payload)
        if payload.startswith(PROBE):
            self.probed.add(payload)
        else:
            self.ledger.receive(self.client_id, payload)

    def on_session(self, present: bool) -> None:
        if not present:  # a new (or lost) session: subscribe again
            self.client.subscribe(self.topic, self.qos)

    def start(self, timeout: float = 15.0) -> None:
        super().start(timeout)
        if not self.subscribed.wait(timeout):
            raise TimeoutError(f"{self.topic}: no SUBACK")


class LedgerPublisher(RoamingClient):
    """Publishes ``<stream>:<seq>`` on ``topic``; records each successful acknowledgement."""

    def __init__(
        self,
        ledger: DeliveryLedger,
        ports: Sequence[int],
        client_id: str,
        topic: str,
        qos: int,
        stream: str = "",
        **options: Any,
    ) -> None:
        super().__init__(ports, client_id, **options)
        self.ledger = ledger
        self.topic = topic
        self.qos = qos
        self.stream = stream or client_id
        self.probe = PROBE + b":" + self.stream.encode()
        ledger.stream(self.stream, qos, topic)
        self.seq = 0
        self._mids: dict[int, int] = {}  # paho message id -> sequence number
        self._early: dict[int, int] = {}  # message id -> ack reason, ack seen before the id
        self._lock = threading.Lock()
        self.client.on_publish = self._on_publish

    def publish_next(self) -> None:
        """Publish the next sequence number (from one thread: the load's)."""
        self.seq += 1
        seq = self.seq
        # not under self._lock: paho calls _on_publish holding its own lock (lock order)
        info = self.client.publish(self.topic, f"{self.stream}:{seq}", qos=self.qos)
        if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
            return  # not queued by paho: never acknowledged, never counted
        with self._lock:
            reason = self._early.pop(info.mid, None)
            if reason is None:
                self._mids[info.mid] = seq
                return
        self.ledger.ack(self.stream, seq, reason)  # acknowledged before publish() returned

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        with self._lock:
            seq = self._mids.pop(mid, None)
            if seq is None:
                self._early[mid] = _code(reason)
                return
        self.ledger.ack(self.stream, seq, _code(reason))

    @property
    def unacknowledged(self) -> int:
        with self._lock:
            return len(self._mids)


class PublishLoad:
    """A thread publishing round robin over ``publishers`` at ``rate`` messages/s in all."""

    def __init__(self, publishers: Sequence[LedgerPublisher], rate: float) -> None:
        self.publishers = list(publishers)
        self.rate = rate
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="publish-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        started = time.monotonic()
        for publisher in itertools.cycle(self.publishers):
            if self._stop.is_set():
                return
            due = started + self.sent / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            publisher.publish_next()
            self.sent += 1

    def wait_acknowledged(self, timeout: float) -> int:
        """Wait until no publisher has a message without acknowledgement; return how many
        are still unacknowledged at the end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = sum(p.unacknowledged for p in self.publishers)
            if not left:
                return 0
            time.sleep(0.1)
        return sum(p.unacknowledged for p in self.publishers)


def load_with_fault(
    ledger: DeliveryLedger, fleet: Fleet, rate: float, fault: Callable[[], None]
) -> None:
    """Start ``fleet``, publish at ``rate`` while ``fault`` runs, stop publishing and wait until
    every publish is acknowledged; the fleet stays connected (``settle_and_check`` stops it),
    unless this fails."""
    try:
        fleet.start(timeout=20)
        load = PublishLoad(fleet.publishers, rate)
        load.start()
        fault()
        load.stop()
        left = load.wait_acknowledged(timeout=30)
        assert left == 0, f"{left} publishes never acknowledged; {ledger.report()}"
    except BaseException:
        fleet.stop()
        raise


def settle_and_check(
    ledger: DeliveryLedger,
    fleet: Fleet,
    logs: Callable[[], dict[str, str]],
    min_acked: int = 300,
    timeout: float = 30.0,
    state: Callable[[], str] | None = None,
) -> LedgerReport:
    """Wait for every acknowledged message (printing the report, and ``logs()`` when something
    is missing or a QoS 2 message came twice), stop the fleet, then assert: at least
    ``min_acked`` acknowledged, 0 missing, 0 QoS 2 duplicates. Stop the nodes afterwards.
    ``state``: a dump of the cluster's end state, printed when something is missing, before
    the fleet stops (``tests.support.fault_state``)."""
    try:
        report = ledger.wait_delivered(timeout=timeout)
        print(
            f"checker: {report}; sessions lost {fleet.sessions_lost}; "
            f"ack reasons {ledger.reason_totals()}"
        )
        if report.missing and state is not None:
            print(f"--- cluster state at the end:\n{state()}")
        if report.missing or report.qos2_duplicates:
            for name, text in logs().items():
                print(f"--- {name} log:\n{text[-6000:]}")
    finally:
        fleet.stop()
    assert report.acked > min_acked, report
    assert report.missing == 0, report
    assert report.qos2_duplicates == 0, report
    return report


def in_background(action: Callable[[], None]) -> threading.Thread:
    """Run a fault in a thread (the load goes on meanwhile); join the thread to wait for it."""
    thread = threading.Thread(target=action, name="fault", daemon=True)
    thread.start()
    return thread


@dataclass
class Fleet:
    """Subscribers and publishers of one checked load, started and stopped together."""

    subscribers: list[LedgerSubscriber] = field(default_factory=list)
    publishers: list[LedgerPublisher] = field(default_factory=list)

    def start(self, timeout: float = 15.0) -> None:
        """Connect everyone, then probe from each publisher until every subscriber of its topic
        gets its probe (the subscription has reached the publisher's node): a publish before
        that may rightly find no subscriber (0x10)."""
        for client in (*self.subscribers, *self.publishers):
            client.start(timeout)
        deadline = time.monotonic() + timeout
        waiting = [(p, s) for p in self.publishers for s in self.subscribers if s.topic == p.topic]
        while waiting:
            for publisher in {p for p, _ in waiting}:
                publisher.client.publish(publisher.topic, publisher.probe, qos=0)
            time.sleep(0.1)
            waiting = [(p, s) for p, s in waiting if p.probe not in s.probed]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(waiting)} publisher -> subscriber routes missing")

    def stop(self) -> None:
        for client in (*self.publishers, *self.subscribers):
            client.stop()

    def move_subscribers(self) -> None:
        """Every subscriber drops its connection and resumes its session on the next node."""
        for subscriber in self.subscribers:
            subscriber.drop()

    @property
    def sessions_lost(self) -> int:
        return sum(c.session_lost for c in (*self.subscribers, *self.publishers))


def checked_fleet(
    ledger: DeliveryLedger,
    ports: Sequence[int],
    prefix: str,
    pairs: int,
    qos_levels: Sequence[int] = (1, 2),
    version: int = V5,
) -> Fleet:
    """``pairs`` publisher/subscriber pairs per QoS level, each pair on two different nodes
    (subscriber n on node n, publisher on node n+1), topic ``<prefix>/q<qos>/<n>``."""
    fleet = Fleet()
    for qos in qos_levels:
        for n in range(pairs):
            topic = f"{prefix}/q{qos}/{n}"
            name = f"{prefix.replace('/', '-')}-q{qos}-{n}"
            fleet.subscribers.append(
                LedgerSubscriber(ledger, ports, f"{name}-s", topic, qos, first=n, version=version)
            )
            fleet.publishers.append(
                LedgerPublisher(
                    ledger, ports, f"{name}-p", topic, qos, first=n + 1, version=version
                )
            )
    return fleet


def node_fleet(
    ledger: DeliveryLedger,
    ports: Sequence[int],
    prefix: str,
    subscribers: int = 1,
    qos_levels: Sequence[int] = (1, 2),
    keepalive: int = 30,
    hosts: Sequence[str] = (),
) -> Fleet:
    """Per node and QoS level ``subscribers`` subscribers and one publisher, all on one topic
    per QoS level ``<prefix>/q<qos>``: every message crosses every link between the nodes, and
    every subscriber of a QoS level must get every message acknowledged at it. Node n's
    clients dial ``ports[n]`` (on ``hosts[n]``, default loopback) first."""
    fleet = Fleet()
    for node in range(len(ports)):
        for qos in qos_levels:
            topic = f"{prefix}/q{qos}"
            name = f"{prefix.replace('/', '-')}-q{qos}-n{node}"
            options: dict[str, Any] = {"first": node, "keepalive": keepalive, "hosts": hosts}
            fleet.subscribers += [
                LedgerSubscriber(ledger, ports, f"{name}-s{k}", topic, qos, **options)
                for k in range(subscribers)
            ]
            fleet.publishers.append(
                LedgerPublisher(ledger, ports, f"{name}-p", topic, qos, **options)
            )
    return fleet

"""SIGTERM while messages flow: everything acknowledged to the publisher reaches the subscriber."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import PahoClient, props

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


def test_sigterm_under_load_flushes_acknowledged_messages(
    start_broker: StartBroker, uid: str
) -> None:
    broker = start_broker("shutdown: {grace_s: 5}\n")
    subscriber = PahoClient(broker.port, f"{uid}-sub")
    publisher = PahoClient(broker.port, f"{uid}-pub")
    sent: dict[int, int] = {}  # paho message id -> payload number
    stop = threading.Event()

    def publish_forever() -> None:
        # paho keeps up to 20 QoS 1 messages in flight: SIGTERM lands in the middle of them.
        n = 0
        while not stop.is_set():
            info = publisher.client.publish(f"{uid}/load", str(n).encode(), qos=1)
            if info.rc != 0:
                return  # the broker went away
            sent[info.mid] = n
            n += 1
            if n % 20 == 0:
                time.sleep(0.001)

    def acked() -> set[int]:
        with publisher._lock:
            return {sent[mid] for mid, code in publisher.pub_reasons.items() if code == 0}

    try:
        session = props(PacketTypes.CONNECT, SessionExpiryInterval=300)
        assert subscriber.connect(clean_start=True, properties=session).reason == 0
        assert subscriber.subscribe(f"{uid}/load", qos=1) == [1]
        assert publisher.connect().reason == 0
        worker = threading.Thread(target=publish_forever, daemon=True)
        worker.start()
        deadline = time.monotonic() + 10
        while len(acked()) < 500:
            assert time.monotonic() < deadline, "publisher too slow"
            time.sleep(0.01)
        assert broker.terminate() == 0
        stop.set()
        worker.join(10)
        # the DISCONNECT comes after every PUBLISH written to this subscriber
        assert subscriber.disconnects.get(timeout=5).reason == 0x8B
        received: set[int] = set()
        while not subscriber.messages.empty():
            received.add(int(subscriber.messages.get_nowait().payload))
        missing = sorted(acked() - received)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    finally:
        stop.set()
        subscriber.close()
        publisher.close()

"""SIGTERM honours ``shutdown.grace_s`` with clients connected, slow readers and a Redis that
stopped answering: the process exits within grace_s and a small margin (it took 17 s with
grace_s 5: the clients got the whole grace, then leaving the cluster waited on Redis)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import PahoClient, props
from tests.support.raw_client import RawClient
from tests.support.redis_server import RedisServer, free_port
from xmq.codec.packets import Subscribe, SubscriptionRequest

pytestmark = pytest.mark.integration

GRACE_S = 3.0
MARGIN_S = 3.0
"""The bound asserted: grace_s + this (the broker's own watchdog fires at grace_s + 2)."""


def test_sigterm_exits_within_grace_with_slow_readers_and_a_stalled_redis(
    redis_server: RedisServer, uid: str
) -> None:
    broker = BrokerProcess(
        f"cluster: {{redis_url: '{redis_server.url}', name: grace-{uid}, "
        "link_host: 127.0.0.1, link_port: 0}\n"
        f"shutdown: {{grace_s: {GRACE_S}}}\n"
    )
    clients: list[PahoClient] = []
    slow: list[RawClient] = []
    paused = False
    try:
        session = props(PacketTypes.CONNECT, SessionExpiryInterval=300)
        for n in range(5):
            client = PahoClient(broker.port, f"{uid}-c{n}")
            assert client.connect(clean_start=True, properties=session).reason == 0
            assert client.subscribe(f"{uid}/q/#", qos=1) == [1]
            clients.append(client)
        for n in range(3):  # subscribers that never read: their buffers fill up
            reader = RawClient(broker.port)
            reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.connect(f"{uid}-slow{n}")
            reader.send_packet(Subscribe(1, [SubscriptionRequest(f"{uid}/big/#", 0)]))
            slow.append(reader)
        publisher = PahoClient(broker.port, f"{uid}-pub")
        clients.append(publisher)
        assert publisher.connect().reason == 0
        for _ in range(200):
            publisher.client.publish(f"{uid}/big/x", b"x" * 60_000, qos=0)
        for n in range(50):
            assert publisher.publish(f"{uid}/q/x", str(n).encode(), qos=1) == 0
        clients[0].expect(50)

        redis_server.pause()  # Redis stops answering (no reset): the worst case for leaving
        paused = True
        started = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        broker.proc.wait(GRACE_S + MARGIN_S + 30)  # bounded; the assertion below is the test
        took = time.monotonic() - started
        assert took < GRACE_S + MARGIN_S, f"exit {took:.1f}s after SIGTERM\n{broker.log()[-2000:]}"
        assert "Traceback" not in broker.log()
    finally:
        if paused:
            redis_server.resume()
        for client in clients:
            client.close()
        for reader in slow:
            reader.sock.close()
        broker.stop()


def test_sigterm_while_waiting_for_redis_at_start(tmp_path: Path) -> None:
    """A node still waiting for its Redis when SIGTERM comes stops at once (it used to finish
    waiting, 30 s, first)."""
    config = tmp_path / "xmq.yaml"
    config.write_text(
        f"cluster: {{redis_url: 'redis://127.0.0.1:{free_port()}/0', link_port: 0}}\n"
        f"metrics: {{enabled: false}}\nshutdown: {{grace_s: {GRACE_S}}}\n"
    )
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "xmq", "serve", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=dict(os.environ, XMQ_SYS__INTERVAL_S="0"),
        )
    try:
        deadline = time.monotonic() + 30
        while "waiting for redis" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(GRACE_S + MARGIN_S + 30)
        took = time.monotonic() - started
        assert took < GRACE_S + MARGIN_S, f"exit {took:.1f}s after SIGTERM\n{log.read_text()}"
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_the_watchdog_ends_a_shutdown_that_overruns() -> None:
    """What still runs at grace_s + SHUTDOWN_OVERRUN_S (a thread, a task that ignores
    cancellation) cannot keep the process: the watchdog exits with 1."""
    code = (
        "import threading, time\n"
        "from xmq.app.server import _arm_watchdog\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()  # not a daemon: would hold\n"
        "_arm_watchdog(0.2)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 30
    assert "shutdown took longer than shutdown.grace_s" in done.stderr

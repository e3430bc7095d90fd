"""The password-hashing pool is fair: 60 concurrent wrong logins from distinct source
addresses do not hold up a good login for long (it measured 25 s before, 0.6 s idle)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts_file import write_accounts
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from xmq.auth.verifiers import HashPolicy
from xmq.codec.packets import MQTT_5, Connack, Connect

pytestmark = pytest.mark.integration

GOOD = {"good-1": "first secret", "good-2": "second secret"}
ATTACKERS = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # a real cost for the good users; unknown user names cost the default (600,000) each
    accounts = write_accounts(
        tmp_path / "a.yaml", GOOD, None, HashPolicy(pbkdf2_iterations=200_000)
    )
    process = BrokerProcess(f"auth:\n  accounts_file: {accounts}\n")
    try:
        yield process
    finally:
        process.stop()


def login(port: int, username: str, password: str, source: str = "") -> int:
    """One CONNECT; its CONNACK reason code (-1: closed without one)."""
    raw = RawClient(port, source=source)
    try:
        raw.sock.settimeout(60)
        raw.send_packet(
            Connect(
                protocol_version=MQTT_5,
                client_id="",
                keep_alive=30,
                username=username,
                password=password.encode(),
            )
        )
        ack = raw.read_packet(timeout=60)
        return ack.reason_code if isinstance(ack, Connack) else -1
    finally:
        raw.close()


def timed_login(port: int, username: str) -> float:
    started = time.monotonic()
    assert login(port, username, GOOD[username]) == 0
    return time.monotonic() - started


def test_a_good_login_is_not_queued_behind_a_flood_of_wrong_ones(broker: BrokerProcess) -> None:
    idle = timed_login(broker.port, "good-1")  # the first login: a real hash
    stop = threading.Event()
    sent = threading.Semaphore(0)
    answers: list[int] = []

    def attack(index: int) -> None:
        source = f"127.0.0.{2 + index}"
        for attempt in range(20):  # bounded: at most 20 attempts each
            if stop.is_set():
                return
            sent.release()
            answers.append(login(broker.port, f"nobody-{index}-{attempt}", "guess", source))

    threads = [threading.Thread(target=attack, args=(n,), daemon=True) for n in range(ATTACKERS)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(ATTACKERS):  # every attacker's first wrong login is on its way
            assert sent.acquire(timeout=30)
        time.sleep(0.5)  # and queued for its hash
        under_attack = timed_login(broker.port, "good-2")
        assert under_attack < 5 * idle + 3.0, (
            f"{under_attack:.2f} s under attack, {idle:.2f} s idle"
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    # wrong (0x86), refused by the guard or the pool (0x9F), or dropped at the connect
    # deadline while its hash waited (closed without CONNACK)
    assert 0x86 in answers and set(answers) <= {0x86, 0x9F, -1}

"""Message Expiry Interval: integer deadlines, never forwarded larger than sent (MQTT-3.3.2-6)."""

from __future__ import annotations

import random

import pytest

from xmq.codec.packets import MQTT_5, Publish
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.core.message import Message


def _forwarded_interval(message: Message, now: float) -> int | None:
    head, tail = message.encode(MQTT_5, 0, False, now=now)
    (packet,) = PacketReader(protocol_version=MQTT_5).feed(head + tail)
    assert isinstance(packet, Publish) and packet.properties is not None
    return packet.properties.message_expiry_interval


def _message(interval: int, now: float) -> Message:
    props = Properties(message_expiry_interval=interval)
    return Message("t", b"x", 0, False, props, "pub", now)


@pytest.mark.spec("5:MQTT-3.3.2-6")
@pytest.mark.parametrize("interval", [1, 60, 3600, 86_400])
def test_never_forwarded_larger_than_sent(interval: int) -> None:
    """[MQTT-3.3.2-6] On the broker's clock at arbitrary fractions: the float sum
    ``now + 3600 - now`` rounds up to 3601 for about one ``now`` in seven."""
    rng = random.Random(interval)
    for _ in range(3000):
        now = rng.uniform(0, 10_000_000)
        message = _message(interval, now)
        for waited in (0.0, 1e-9, 0.001, rng.uniform(0, interval)):
            forwarded = _forwarded_interval(message, now + waited)
            assert forwarded is not None and 1 <= forwarded <= interval, (now, waited)


def test_the_known_rounding_case() -> None:
    # 1000.002 + 3600 - 1000.002 == 3600.0000000000005 (the reported 3601 for 3600)
    assert (1000.002 + 3600) - 1000.002 > 3600
    assert _forwarded_interval(_message(3600, 1000.002), 1000.002) == 3600
    assert _forwarded_interval(_message(60, 1000.003), 1000.003) == 60


@pytest.mark.spec("5:MQTT-3.3.2-5", "5:MQTT-3.3.2-6")
def test_remaining_counts_down_in_whole_seconds_and_never_expires_late() -> None:
    message = _message(10, 100.25)  # deadline: second 110 of the broker clock
    assert message.expires_at == 110 and isinstance(message.expires_at, int)
    assert _forwarded_interval(message, 100.25) == 10
    assert _forwarded_interval(message, 104.5) == 6
    assert _forwarded_interval(message, 109.9) == 1
    assert not message.expired(109.999)
    assert message.expired(110.0)  # [MQTT-3.3.2-5] not delivered once the interval passed
    assert message.expired(110.25)

"""Micro-benchmarks of the MQTT codec hot path (plain perf_counter loops, ns per op).

Run: .venv/bin/python bench/codec_bench.py [--quick] [--repeats N]

Every case runs ``--repeats`` times, interleaved with the others, and the best run is kept,
so a noisy shared machine disturbs the numbers as little as possible. The "empty function
call" row is a calibration: it shows how fast this machine runs Python right now.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from xmq.codec.packets import Publish
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode, encode_publish_parts

PAYLOAD = b"0123456789abcdef"
TOPIC = "bench/fanout/topic/42"
BATCH = 64

# A case: (name, run) where run() performs some operations and returns how many.
Case = tuple[str, Callable[[], int]]


def _publish_stream(version: int) -> bytes:
    return b"".join(
        encode(Publish(TOPIC, PAYLOAD, 1, False, False, i + 1, None), version) for i in range(BATCH)
    )


def decode_whole(version: int, rounds: int) -> Case:
    """Decode chunks of BATCH QoS 1 PUBLISH packets (16-byte payload), one feed per chunk."""
    chunk = _publish_stream(version)
    reader = PacketReader(protocol_version=version)
    assert len(reader.feed(chunk)) == BATCH

    def run() -> int:
        feed = reader.feed
        for _ in range(rounds):
            feed(chunk)
        return rounds * BATCH

    return f"decode QoS1 PUBLISH 16B v{version}, whole chunks", run


def decode_split(version: int, rounds: int) -> Case:
    """Same stream, but each chunk ends in the middle of a packet (buffered path)."""
    chunk = _publish_stream(version)
    cut = len(chunk) // 2 + 7
    first, second = chunk[:cut], chunk[cut:]
    reader = PacketReader(protocol_version=version)

    def run() -> int:
        feed = reader.feed
        for _ in range(rounds):
            feed(first)
            feed(second)
        return rounds * BATCH

    return f"decode QoS1 PUBLISH 16B v{version}, split chunks", run


def encode_parts(version: int, props: Properties | None, rounds: int) -> Case:
    def run() -> int:
        for _ in range(rounds):
            encode_publish_parts(TOPIC, PAYLOAD, 1, False, props, version)
        return rounds

    label = "+ 2 properties" if props is not None else "no properties"
    return f"encode_publish_parts QoS1 16B v{version}, {label}", run


def patch_packet_id(rounds: int) -> Case:
    """Per-subscriber cost once the PUBLISH is encoded: head + packet id + tail."""
    head, tail = encode_publish_parts(TOPIC, PAYLOAD, 1, False, None, 5)

    def run() -> int:
        for packet_id in range(1, rounds + 1):
            b"".join((head, packet_id.to_bytes(2, "big"), tail))
        return rounds

    return "per-subscriber packet id patch (join)", run


def empty_call(rounds: int) -> Case:
    def nothing() -> None:
        return None

    def run() -> int:
        for _ in range(rounds):
            nothing()
        return rounds

    return "calibration: empty function call", run


def main() -> None:
    parser = argparse.ArgumentParser(description="XMQ codec micro-benchmarks")
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--repeats", type=int, default=9, help="runs per case; best is kept")
    args = parser.parse_args()
    rounds = 20 if args.quick else 300
    repeats = 2 if args.quick else args.repeats
    props = Properties(user_properties=[("k", "v")], message_expiry_interval=60)
    cases = [
        decode_whole(4, rounds),
        decode_whole(5, rounds),
        decode_split(5, rounds),
        encode_parts(4, None, rounds * 20),
        encode_parts(5, None, rounds * 20),
        encode_parts(5, props, rounds * 20),
        patch_packet_id(rounds * 20),
        empty_call(rounds * 20),
    ]
    best = {name: float("inf") for name, _ in cases}
    for _ in range(repeats):
        for name, run in cases:
            start = time.perf_counter_ns()
            ops = run()
            best[name] = min(best[name], (time.perf_counter_ns() - start) / ops)
    width = max(len(name) for name in best)
    unit = best["calibration: empty function call"]
    for name, ns in best.items():
        print(f"{name:<{width}}  {ns:8.0f} ns/op  {ns / unit:6.1f} x empty call")


if __name__ == "__main__":
    main()

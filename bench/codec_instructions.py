"""Instructions per operation of the codec's decode paths, under callgrind (N minus N/2).

Each case runs in its own ``python`` under ``valgrind --tool=callgrind``, once with N
operations and once with N/2; (I(N) - I(N/2)) / (N - N/2) is the cost of one operation with
start-up (interpreter, imports, building the input) cancelled. Counts are the same on a busy
and on a quiet machine, so two revisions compare exactly (run this in each worktree).

Cases: a QoS 1 PUBLISH (MQTT 5, no properties) with a 16-byte payload (one-byte remaining
length) and with a 200-byte payload (two-byte remaining length), decoded by ``read_plain``
(the one-PUBLISH-per-read fast path, into one connection's ``PlainRead``: the topic found there
from the read before) and by ``PacketReader.feed`` (64 packets per read); and an MQTT 5 PUBLISH
whose properties hold a Subscription Identifier (a variable byte integer).

    .venv/bin/python bench/codec_instructions.py [--ops 20000] [--case NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from xmq.bench.tracers import count_instructions, per_unit
from xmq.codec.packets import Publish
from xmq.codec.plain_publish import PlainRead, read_plain
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode

TOPIC = "bench/p2p/1234"
BATCH = 64


def _publish(payload_size: int, properties: Properties | None = None) -> bytes:
    return encode(Publish(TOPIC, b"x" * payload_size, 1, False, False, 7, properties), 5)


def _plain(payload_size: int) -> Callable[[int], None]:
    data = _publish(payload_size)
    into = PlainRead()
    assert read_plain(data, 5, 1 << 20, into)

    def run(ops: int) -> None:
        for _ in range(ops):
            read_plain(data, 5, 1 << 20, into)

    return run


def _reader(packet: bytes) -> Callable[[int], None]:
    chunk = packet * BATCH
    reader = PacketReader(protocol_version=5)
    assert len(reader.feed(chunk)) == BATCH

    def run(ops: int) -> None:
        feed = reader.feed
        for _ in range(ops // BATCH):
            feed(chunk)

    return run


CASES: dict[str, Callable[[], Callable[[int], None]]] = {
    "plain_publish 16 B": lambda: _plain(16),
    "plain_publish 200 B": lambda: _plain(200),
    "reader 16 B": lambda: _reader(_publish(16)),
    "reader 200 B": lambda: _reader(_publish(200)),
    "reader 16 B + subscription id": lambda: _reader(
        _publish(16, Properties(subscription_identifiers=[300]))
    ),
}


def _count(case: str, ops: int, out_dir: Path) -> int:
    argv = [sys.executable, __file__, "--inner", case, "--ops", str(ops)]
    return count_instructions(argv, out_dir / f"callgrind.{ops}.out")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=BATCH * 320)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        CASES[args.inner]()(args.ops)
        return 0
    print("| case | instructions per packet |\n|---|---|")
    with tempfile.TemporaryDirectory(prefix="xmq-codec-instr-") as tmp:
        for case in args.case or list(CASES):
            full = _count(case, args.ops, Path(tmp))
            half = _count(case, args.ops // 2, Path(tmp))
            print(f"| {case} | {per_unit(full, half, args.ops, args.ops // 2):,.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

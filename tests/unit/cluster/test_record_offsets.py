"""The forward's record read by its offsets (``link_dispatch.decode_message``) and written with
kept text fields (``link_frames.publish_record``): the same messages and bytes as the general
record codec (``contract.message_record``), for any record, prefix of one, or number of texts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.append_recorder import AppendRecorder
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_dispatch import Decoded, _decoded, decode_message
from xmq.contract.message_record import encode_record
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.settings import CoreSettings


def _hub() -> ClusterHub:
    return ClusterHub(
        Broker(CoreSettings()),
        NodeIdentity("node-2", 5, online=True),
        AppendRecorder(),  # type: ignore[arg-type]
    )


def _fields(decoded: Decoded) -> tuple[object, ...]:
    message, qos, retain, ids = decoded
    return (
        message.topic,
        message.payload,
        message.qos,
        message.retain,
        message.origin,
        message.forward_id,
        message.properties,
        message.encode(5, message.qos, False),
        qos,
        retain,
        ids,
    )


def _outcome(hub: ClusterHub, record: bytes, general: bool) -> tuple[object, ...] | str:
    try:
        return _fields(_decoded(hub, record) if general else decode_message(hub, record))
    except ValueError:  # RecordError, UnicodeDecodeError: the link drops the peer for either
        return "refused"


texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@given(
    texts,
    texts.filter(bool),
    st.binary(max_size=300),
    st.integers(0, 2),
    st.booleans(),
    st.none() | texts,
    st.integers(0, 2),
    st.booleans(),
    st.sampled_from([(), (7,)]),
)
def test_a_record_read_by_its_offsets_is_the_record_decode_fields_reads(
    record_id: str,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    origin: str | None,
    delivery_qos: int,
    delivery_retain: bool,
    ids: tuple[int, ...],
) -> None:
    """Every record (with identifiers: the general path) and every prefix of it (a record
    cut short: refused by both, or read alike when what is left is a record too)."""
    record = encode_record(
        record_id, topic, payload, qos, retain, None, origin, delivery_qos, delivery_retain, ids
    )
    hub = _hub()
    decoded = decode_message(hub, record)
    assert _fields(decoded) == _fields(_decoded(hub, record))
    assert (decoded[0].topic, decoded[0].payload, decoded[0].forward_id) == (
        topic,
        payload,
        record_id,
    )
    assert decoded[0].origin == (origin or None)
    for size in range(len(record)):
        assert _outcome(hub, record[:size], False) == _outcome(hub, record[:size], True)


def test_bad_utf_8_or_a_qos_above_2_is_read_as_the_general_path_reads_it() -> None:
    hub = _hub()
    record = encode_record("n/1/f1", "t/é", b"x", 1, False, None, "p", 1, False)
    broken = record.replace("é".encode(), b"\xff\xfe")
    assert _outcome(hub, broken, False) == _outcome(hub, broken, True) == "refused"
    high = bytearray(record)
    high[2] = 3  # (no message's QoS: not the offsets' path)
    assert _outcome(hub, bytes(high), False) == _outcome(hub, bytes(high), True)


def test_more_texts_than_are_kept_are_read_and_written_alike() -> None:
    """Past the sender's cache bound (4,096 texts: cleared whole) and past the kept length (a
    text of more than 255 bytes is encoded each time), the frames and messages are the
    general codec's."""
    hub = _hub()
    for n in range(4_200):
        topic = f"t/{n}" if n % 100 else "x" * (300 + n % 7)
        origin = f"client-{n % 4_150}"
        built = frames.publish_record(
            bool(n & 1), b"n/1/f%d" % n, topic, b"p", 1, False, None, origin, 1, False
        )
        record = encode_record(f"n/1/f{n}", topic, b"p", 1, False, None, origin, 1, False)
        assert built == frames.publish(record, bool(n & 1))
        message = decode_message(hub, record)[0]
        assert (message.topic, message.origin, message.forward_id) == (topic, origin, f"n/1/f{n}")

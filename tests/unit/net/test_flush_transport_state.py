"""A flush writes without asking the transport ``is_closing()`` each time: the protocol knows
when its transport stops taking bytes (the client's EOF, its own close and abort), and a write
refused because uvloop closed the transport on an error meanwhile is dropped only when the
transport says it is closing. The packet id of a PUBLISH comes from the codec's ``u16`` table,
and a flush of several packets writes them once, in order."""

from __future__ import annotations

import pytest

from tests.unit.net.test_read_end_flush import _Node, _publish, _subscribed
from xmq.codec.packets import Puback, Publish


def test_a_flush_does_not_ask_the_transport_whether_it_is_closing() -> None:
    node = _Node()
    _, sub_out = _subscribed(node)
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))
    node.turn()
    assert [[type(p) for p in write] for write in sub_out.packets()] == [[Publish]]
    assert pub_out.packets() == [[Puback(1)]]
    assert sub_out.asked_closing == 0
    assert pub_out.asked_closing == 0


def test_nothing_is_written_after_the_client_s_eof() -> None:
    """The transport closes itself once ``eof_received`` returns: the subscriber's PUBLISH
    stays unwritten (in flight, for its session), though ``is_closing`` would say False."""
    node = _Node()
    sub, sub_out = _subscribed(node)
    assert sub.eof_received() is None
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))
    node.turn()
    assert sub_out.writes == []
    assert pub_out.packets() == [[Puback(1)]]
    session = sub.conn.session
    assert session is not None and len(session.inflight) == 1


def test_a_write_refused_by_a_closing_transport_is_dropped() -> None:
    node = _Node()
    _, sub_out = _subscribed(node)
    sub_out.refuse = sub_out.closing = True  # uvloop closed it on an error, not told us yet
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))  # no exception out of the publisher's read
    node.turn()
    pub.data_received(_publish(2))  # the next output is marked and dropped the same way
    node.turn()
    assert sub_out.writes == []
    assert sub_out.asked_closing == 2  # asked on each refused write only
    assert pub_out.packets() == [[Puback(1)], [Puback(2)]]


def test_a_write_refused_by_a_transport_that_is_not_closing_raises() -> None:
    node = _Node()
    sub, sub_out = _subscribed(node)
    sub.write(b"\xd0\x00")
    sub_out.refuse = True
    with pytest.raises(RuntimeError):
        sub.flush()


@pytest.mark.parametrize("packet_id", [1, 0xFF, 0x100, 0x1234, 0xFFFF])
def test_write_publish_writes_the_packet_id_in_two_bytes(packet_id: int) -> None:
    node = _Node()
    sub, sub_out = node.client("sub")
    sub.write_publish(b"\x32\x0a\x00\x03t/1", packet_id, b"\x00abc")
    sub.flush()
    assert sub_out.writes == [b"\x32\x0a\x00\x03t/1" + packet_id.to_bytes(2, "big") + b"\x00abc"]


def test_a_flush_of_several_packets_writes_them_once_in_order() -> None:
    node = _Node()
    sub, sub_out = node.client("sub")
    sub.write(b"\xd0\x00")
    sub.write_publish(b"\x32\x0a\x00\x03t/1", 0x0102, b"\x00abc")
    sub.write(b"\x40\x02\x00\x07")
    sub.flush()
    sub.flush()  # nothing more
    assert sub_out.writes == [b"\xd0\x00\x32\x0a\x00\x03t/1\x01\x02\x00abc\x40\x02\x00\x07"]
    sub.write(b"\xd0\x00")
    sub.flush()
    assert sub_out.writes[1:] == [b"\xd0\x00"]

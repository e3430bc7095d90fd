"""``HeldSuback``: the SUBACK of a persistent session's SUBSCRIBE goes once every subscription
record it made is written, then the retained messages; a record given up closes with 0x80."""

from __future__ import annotations

from typing import cast

from xmq.codec.reason_codes import ReasonCode
from xmq.core.connection import ClientConnection
from xmq.core.subscribe_flow import HeldSuback


class _Link:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _Conn:
    """What ``HeldSuback`` uses of a connection: its link and ``close_with``."""

    def __init__(self) -> None:
        self.link = _Link()
        self.closed: list[int] = []

    def close_with(self, reason_code: int, reason: str = "") -> None:
        self.closed.append(reason_code)


def _held() -> tuple[HeldSuback, _Conn, list[str]]:
    conn = _Conn()
    return HeldSuback(cast(ClientConnection, conn)), conn, []


def test_the_suback_waits_for_every_record_then_the_retained_follow() -> None:
    held, conn, log = _held()
    held.hold()  # two subscriptions' records
    held.hold()
    held.answer(b"suback", lambda: log.append("retained"))
    assert conn.link.written == [] and log == []
    held.release()
    assert conn.link.written == [] and log == []
    held.release()
    assert conn.link.written == [b"suback"]
    assert log == ["retained"]
    assert conn.closed == []


def test_records_written_before_the_answer_send_it_at_once() -> None:
    held, conn, _ = _held()
    held.hold()
    held.release()
    assert conn.link.written == []  # the SUBSCRIBE's own hold: no SUBACK known yet
    held.answer(b"suback", None)
    assert conn.link.written == [b"suback"]


def test_a_record_given_up_closes_the_connection_without_a_suback() -> None:
    held, conn, log = _held()
    held.hold()
    held.hold()
    held.answer(b"suback", lambda: log.append("retained"))
    held.fail()
    held.release()
    assert conn.link.written == [] and log == []
    assert conn.closed == [ReasonCode.UNSPECIFIED_ERROR]

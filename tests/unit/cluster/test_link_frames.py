"""The node-link framing: frames survive any split of the byte stream; bad input is refused."""

from __future__ import annotations

import pytest

from xmq.cluster import link_frames as frames
from xmq.cluster.link_frames import BodyReader, FrameDecoder, FrameError, Kind


def test_frames_round_trip_through_any_split() -> None:
    stream = b"".join(
        [
            frames.hello("node-1", 7),
            frames.route(True, "a/+/c"),
            frames.share(False, "g", "x/#"),
            frames.durable_sub(True, "client", "f", "f", 2, 3),
            frames.publish(b"\x01record"),
            frames.takeover(9, "client", 7),
        ]
    )
    for chunk in (1, 2, 5, 64, len(stream)):
        decoder = FrameDecoder()
        got: list[tuple[int, bytes]] = []
        for start in range(0, len(stream), chunk):
            got.extend(decoder.feed(stream[start : start + chunk]))
        assert [kind for kind, _ in got] == [
            Kind.HELLO,
            Kind.ROUTE,
            Kind.SHARE,
            Kind.DSUB,
            Kind.PUBLISH,
            Kind.TAKEOVER,
        ]
        hello = BodyReader(got[0][1])
        assert (hello.text(), hello.u64()) == ("node-1", 7)
        dsub = BodyReader(got[3][1])
        assert (dsub.u8(), dsub.text(), dsub.text(), dsub.text(), dsub.u8(), dsub.u8()) == (
            1,
            "client",
            "f",
            "f",
            2,
            3,
        )
        assert BodyReader(got[4][1]).rest() == b"\x01record"


def test_zero_length_frame_is_refused() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(b"\x00\x00\x00\x00\x01")


def test_truncated_body_is_refused() -> None:
    reader = BodyReader(b"\x00\x05ab")
    with pytest.raises(FrameError):
        reader.text()


def test_a_takeover_says_whether_the_session_ends_and_reads_as_before_without_it() -> None:
    for ends in (False, True):
        body = frames.takeover(9, "client", 7, ends)[5:]
        reader = BodyReader(body)
        assert (reader.u32(), reader.text(), reader.u64(), reader.rest()) == (
            9,
            "client",
            7,
            bytes((ends,)),
        )
    # a node of the version before stops after the epoch: its frame is a resume
    old = frames.takeover(9, "client", 7)[5:-1]
    reader = BodyReader(old)
    assert (reader.u32(), reader.text(), reader.u64(), reader.rest()) == (9, "client", 7, b"")

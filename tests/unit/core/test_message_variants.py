"""A message's cached wire variants never stand in for one another."""

from __future__ import annotations

import itertools

from xmq.codec.writer import encode_publish_parts
from xmq.core.message import Message


def test_every_version_qos_and_retain_flag_gets_its_own_bytes() -> None:
    message = Message("t/1", b"payload", 2, True, None, "pub", 0.0)
    variants = list(itertools.product((3, 4, 5), (0, 1, 2), (False, True)))
    for version, qos, retain in variants + variants[::-1]:
        assert message.encode(version, qos, retain) == encode_publish_parts(
            "t/1", b"payload", qos, retain, None, version
        ), (version, qos, retain)


def test_a_seeded_variant_is_used_only_for_its_own_version_and_qos() -> None:
    wire = encode_publish_parts("t/1", b"payload", 2, False, None, 5)
    message = Message("t/1", b"payload", 2, False, None, "pub", 0.0, wire, 5)
    assert message.encode(5, 2, False) is wire
    for version, qos in itertools.product((3, 4, 5), (0, 1, 2)):
        assert message.encode(version, qos, True) == encode_publish_parts(
            "t/1", b"payload", qos, True, None, version
        )
        assert message.encode(version, qos, False) == encode_publish_parts(
            "t/1", b"payload", qos, False, None, version
        )

"""A message's cached wire variants never stand in for one another."""

from __future__ import annotations

import itertools
import sys

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


def test_the_first_and_later_variants_are_each_encoded_once() -> None:
    message = Message("t/1", b"payload", 1, False, None, "pub", 0.0)
    with_ids = message.encode(5, 1, False, (7,))  # a keyed (non-integer) variant first
    first = message.encode(5, 1, False)
    second = message.encode(4, 1, False)
    assert message.encode(5, 1, False, (7,)) is with_ids
    assert message.encode(5, 1, False) is first
    assert message.encode(4, 1, False) is second
    assert first != second != with_ids


def test_a_copy_without_id_and_a_plain_round_trip_keep_the_cached_variants() -> None:
    wire = encode_publish_parts("t/1", b"payload", 1, False, None, 5)
    message = Message("t/1", b"payload", 1, False, None, "pub", 0.0, wire, 5, "n/1/f1")
    later = message.encode(4, 0, True)
    copy = message.without_id()
    assert copy.forward_id == ""
    assert copy.encode(5, 1, False) is wire
    assert copy.encode(4, 0, True) is later
    copy.encode(3, 2, True)  # a variant cached by the copy only
    assert message.encode(3, 2, True) is not copy.encode(3, 2, True)
    plain = message.plain()
    assert plain is not None
    restored = Message.from_plain(plain)
    assert restored.encode(5, 1, False) == wire  # the one variant ``plain`` carries
    assert restored.plain() == plain
    for version, qos, retain in itertools.product((3, 4, 5), (0, 1, 2), (False, True)):
        expected = encode_publish_parts("t/1", b"payload", qos, retain, None, version)
        assert copy.encode(version, qos, retain) == expected
        assert restored.encode(version, qos, retain) == expected


def test_a_message_made_after_one_freed_starts_fresh() -> None:
    """Compiled, the last ``Message`` freed is kept for the next one made (mypyc's free list
    of one): the next one has none of its fields, its unset-until-queued ones unset again (the
    memory accounting reads them with a default), and the freed one lets go of its payload."""
    payload = b"payload kept elsewhere"
    held = sys.getrefcount(payload)
    old = Message("old/t", payload, 2, True, None, "pub", 0.0)
    old.encode(5, 2, True)
    old.forward_id = "n/1/f1"
    old.queued_refs = 3
    old.queued_key = 12
    del old
    assert sys.getrefcount(payload) == held  # freed (or kept for reuse) without its payload
    new = Message("new/t", b"y", 1, False, None, None, 0.0)
    assert getattr(new, "queued_refs", 0) == 0 and getattr(new, "queued_key", 0) == 0
    assert (new.topic, new.payload, new.qos, new.retain, new.origin, new.forward_id) == (
        "new/t",
        b"y",
        1,
        False,
        None,
        "",
    )
    assert new.encode(5, 1, False) == encode_publish_parts("new/t", b"y", 1, False, None, 5)

from __future__ import annotations

import pytest

from xmq.codec.errors import ProtocolError
from xmq.protocol.topic_aliases import InboundTopicAliases, OutboundTopicAliases


def test_inbound_alias_is_set_then_resolved() -> None:
    aliases = InboundTopicAliases(maximum=4)
    assert aliases.resolve("a/b", 2) == "a/b"
    assert aliases.resolve("", 2) == "a/b"
    assert aliases.resolve("c", 2) == "c"  # re-mapped
    assert aliases.resolve("", 2) == "c"
    assert aliases.resolve("plain", None) == "plain"


@pytest.mark.parametrize(
    ("topic", "alias", "code"),
    [("t", 0, 0x94), ("t", 5, 0x94), ("", 3, 0x82), ("", None, 0x82)],
    ids=["zero", "above-maximum", "never-set", "empty-without-alias"],
)
def test_inbound_alias_errors(topic: str, alias: int | None, code: int) -> None:
    with pytest.raises(ProtocolError) as raised:
        InboundTopicAliases(maximum=4).resolve(topic, alias)
    assert raised.value.reason_code == code


def test_outbound_aliases_reuse_and_replace_least_recent() -> None:
    aliases = OutboundTopicAliases(maximum=2)
    assert aliases.assign("a") == (1, True)
    assert aliases.assign("a") == (1, False)
    assert aliases.assign("b") == (2, True)
    assert aliases.assign("a") == (1, False)  # a is now the most recent
    assert aliases.assign("c") == (2, True)  # replaces b, the least recent
    assert aliases.assign("b") == (1, True)


def test_outbound_aliases_disabled() -> None:
    assert OutboundTopicAliases(maximum=0).assign("a") == (0, True)

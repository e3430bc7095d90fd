from __future__ import annotations

import pytest

from xmq.auth.acl import AclRule, Action, DenyAll, Permission, RuleAcl, check_access
from xmq.auth.acl_patterns import (
    PatternError,
    compile_pattern,
    covers_filter,
    matches_topic,
    overlaps_filter,
    parse_filter,
    validate_rule_filter,
)

ALLOW, DENY = Permission.ALLOW, Permission.DENY
PUB, SUB, BOTH = Action.PUBLISH, Action.SUBSCRIBE, Action.BOTH


def acl(*rules: AclRule, user: str | None = "alice", client: str = "c1", **kw: bool) -> RuleAcl:
    return RuleAcl(rules, username=user, groups=("default",), client_id=client, **kw)


@pytest.mark.parametrize(
    ("rule", "topic", "expected"),
    [
        ("a/b", "a/b", True),
        ("a/b", "a/b/c", False),
        ("a/+", "a/b", True),
        ("a/+", "a", False),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("#", "x", True),
        ("#", "$SYS/x", False),
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("a//b", "a//b", True),
    ],
    ids=[
        "exact",
        "longer-topic",
        "plus",
        "plus-needs-a-level",
        "hash-matches-parent",
        "hash-deep",
        "hash-all",
        "hash-not-dollar",
        "plus-not-dollar",
        "explicit-dollar",
        "empty-level",
    ],
)
def test_matches_topic(rule: str, topic: str, expected: bool) -> None:
    pattern = compile_pattern(rule, "u", "c")
    assert pattern is not None
    assert matches_topic(pattern, topic) is expected


@pytest.mark.parametrize(
    ("rule", "requested", "covers", "overlaps"),
    [
        ("a/#", "a/+/c", True, True),
        ("a/+", "a/#", False, True),
        ("a/+", "a/b", True, True),
        ("a/b", "a/+", False, True),
        ("a/b", "c/#", False, False),
        ("#", "#", True, True),
        ("#", "$SYS/#", False, False),
        ("secret/#", "#", False, True),
        ("a/+/c", "a/b/d", False, False),
        ("a/#", "a", True, True),
        ("a", "a/#", False, True),
    ],
    ids=[
        "hash-covers-plus",
        "plus-does-not-cover-hash",
        "plus-covers-literal",
        "literal-does-not-cover-plus",
        "disjoint",
        "hash-hash",
        "dollar-needs-explicit-rule",
        "hash-overlaps-secret",
        "different-last-level",
        "hash-covers-parent",
        "parent-overlaps-hash",
    ],
)
def test_cover_and_overlap(rule: str, requested: str, covers: bool, overlaps: bool) -> None:
    pattern = compile_pattern(rule, "u", "c")
    assert pattern is not None
    assert covers_filter(pattern, parse_filter(requested)) is covers
    assert overlaps_filter(pattern, parse_filter(requested)) is overlaps


@pytest.mark.parametrize(
    "bad",
    ["", "a/#/b", "a/b+", "a#", "a\x00b"],
    ids=["empty", "hash-mid", "plus-in-level", "hash-in-level", "nul"],
)
def test_invalid_rule_filters(bad: str) -> None:
    with pytest.raises(PatternError):
        validate_rule_filter(bad)
    with pytest.raises(ValueError):
        AclRule(ALLOW, PUB, bad)


def test_substitution() -> None:
    rules = [AclRule(ALLOW, BOTH, "users/%u/#"), AclRule(ALLOW, PUB, "clients/%c/state")]
    client = acl(*rules)
    assert client.can_publish("users/alice/x", 1, False)
    assert client.can_subscribe("users/alice/#", 1)
    assert not client.can_publish("users/bob/x", 1, False)
    assert client.can_publish("clients/c1/state", 0, False)
    assert not client.can_publish("clients/c2/state", 0, False)
    assert not client.can_subscribe("users/+/x", 0)


@pytest.mark.parametrize(
    ("user", "topic", "expected"),
    [
        ("+", "users/bob/x", False),
        ("#", "users/bob/x", False),
        ("a/b", "users/a/b/x", True),
        ("a/b", "users/a/x", False),
        ("%c", "users/%c/x", True),
        ("%c", "users/c1/x", False),
        ("'; DROP TABLE accounts; --", "users/'; DROP TABLE accounts; --/x", True),
    ],
    ids=[
        "plus-user",
        "hash-user",
        "slash-user",
        "slash-user-other",
        "percent-c-user",
        "percent-c-not-resubstituted",
        "sql-looking-user",
    ],
)
def test_substituted_names_are_literal(user: str, topic: str, expected: bool) -> None:
    client = acl(AclRule(ALLOW, BOTH, "users/%u/#"), user=user)
    assert client.can_publish(topic, 0, False) is expected


def test_literal_plus_user_does_not_grant_wildcard_subscription() -> None:
    client = acl(AclRule(ALLOW, SUB, "users/%u/#"), user="+")
    assert not client.can_subscribe("users/+/x", 0)
    assert not client.can_subscribe("users/bob/x", 0)


def test_user_rule_without_user_name_applies_to_nobody() -> None:
    client = acl(AclRule(ALLOW, BOTH, "users/%u/#"), user=None)
    assert not client.can_publish("users//x", 0, False)
    assert not client.can_publish("users/%u/x", 0, False)


def test_priority_then_deny_first() -> None:
    rules = [
        AclRule(ALLOW, BOTH, "a/#", priority=0),
        AclRule(DENY, PUB, "a/secret", priority=5),
        AclRule(ALLOW, PUB, "a/secret", priority=5),
        AclRule(ALLOW, PUB, "a/secret/open", priority=9),
    ]
    client = acl(*rules)
    assert client.can_publish("a/x", 0, False)
    assert not client.can_publish("a/secret", 0, False)
    assert client.can_publish("a/secret/open", 0, False)
    client = acl(AclRule(ALLOW, PUB, "a/secret", priority=6), *rules)
    assert client.can_publish("a/secret", 0, False)


def test_deny_rule_blocks_overlapping_wildcard_subscriptions() -> None:
    client = acl(AclRule(ALLOW, SUB, "#"), AclRule(DENY, SUB, "secret/#", priority=1))
    assert client.can_subscribe("public/x", 0)
    assert not client.can_subscribe("#", 0)
    assert not client.can_subscribe("+/x", 0)
    assert not client.can_subscribe("$share/g/secret/x", 0)
    assert client.can_subscribe("$share/g/public/+", 0)


def test_conditions_qos_and_retain() -> None:
    client = acl(
        AclRule(ALLOW, BOTH, "t/#", max_qos=1, retain=False),
        AclRule(DENY, PUB, "u/#", retain=True, priority=1),
        AclRule(ALLOW, PUB, "u/#"),
    )
    assert client.can_publish("t/x", 1, False)
    assert not client.can_publish("t/x", 2, False)
    assert not client.can_publish("t/x", 0, True)
    assert client.can_subscribe("t/x", 1)
    assert not client.can_subscribe("t/x", 2)
    assert client.can_publish("u/x", 2, False)
    assert not client.can_publish("u/x", 0, True)


def test_reserved_topics_never_writable() -> None:
    client = acl(AclRule(ALLOW, BOTH, "$SYS/#", priority=100), no_match_allows=True)
    assert not client.can_publish("$SYS/broker/uptime", 0, False)
    assert not client.can_publish("$xmq/internal", 0, False)
    assert client.can_subscribe("$SYS/#", 0)


def test_no_match_default_and_group_selection() -> None:
    rules = [AclRule(ALLOW, PUB, "g/#", group="ops"), AclRule(ALLOW, PUB, "b/#", username="bob")]
    assert not acl(*rules).can_publish("g/x", 0, False)
    assert acl(*rules, no_match_allows=True).can_publish("z", 0, False)
    ops = RuleAcl(rules, username="alice", groups=("default", "ops"), client_id="c")
    assert ops.can_publish("g/x", 0, False)
    assert not ops.can_publish("b/x", 0, False)
    bob = RuleAcl(rules, username="bob", groups=("default",), client_id="c")
    assert bob.can_publish("b/x", 0, False)


def test_decision_cache_is_bounded_and_consistent() -> None:
    client = acl(AclRule(ALLOW, PUB, "a/+"))
    for index in range(5000):
        assert client.can_publish(f"a/{index}", 0, False)
        assert client.can_publish(f"a/{index}", 0, False)
    assert not client.can_publish("b/1", 0, False)
    assert len(client._cache) <= 4096


def test_check_access_and_deny_all() -> None:
    rules = [AclRule(ALLOW, PUB, "p/#"), AclRule(ALLOW, BOTH, "b/#")]
    kw = {"username": "u", "groups": ("default",), "client_id": "c"}
    assert check_access(rules, topic="p/x", action=PUB, **kw)  # type: ignore[arg-type]
    assert not check_access(rules, topic="p/x", action=SUB, **kw)  # type: ignore[arg-type]
    assert not check_access(rules, topic="p/x", action=BOTH, **kw)  # type: ignore[arg-type]
    assert check_access(rules, topic="b/x", action=BOTH, **kw)  # type: ignore[arg-type]
    assert not DenyAll().can_publish("a", 0, False)
    assert not DenyAll().can_subscribe("a", 0)


def test_rule_validation() -> None:
    with pytest.raises(ValueError, match="max_qos"):
        AclRule(ALLOW, PUB, "a", max_qos=3)
    with pytest.raises(ValueError, match="not both"):
        AclRule(ALLOW, PUB, "a", username="u", group="g")

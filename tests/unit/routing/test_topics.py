"""Topic name / filter validation, `$share` parsing and the reference matcher."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmq.routing.topics import (
    TOPIC_FILTER_INVALID,
    TOPIC_NAME_INVALID,
    TopicError,
    filter_matches,
    parse_shared,
    validate_topic_filter,
    validate_topic_name,
)

VALID_NAMES = [
    ("simple", "a"),
    ("levels", "sport/tennis/player1"),
    ("leading_slash", "/finance"),
    ("trailing_slash", "finance/"),
    ("only_slash", "/"),
    ("empty_middle_level", "a//b"),
    ("dollar_sys", "$SYS/broker/clients"),
    ("spaces", "a b/c d"),
    ("unicode", "capteur/température/°C"),
    ("share_lookalike", "$share/g/t"),
    ("max_length_ascii", "x" * 65535),
]

INVALID_NAMES = [
    ("empty", ""),
    ("plus", "a/+/b"),
    ("hash", "a/#"),
    ("plus_inside_level", "a+b"),
    ("hash_inside_level", "a#"),
    ("nul", "a\x00b"),
    ("too_long_ascii", "x" * 65536),
    ("too_long_utf8", "é" * 32768),
    ("lone_surrogate", "a\ud800"),
]

VALID_FILTERS = [
    ("literal", "sport/tennis/player1"),
    ("hash_alone", "#"),
    ("plus_alone", "+"),
    ("trailing_hash", "sport/tennis/player1/#"),
    ("plus_middle", "sport/+/player1"),
    ("plus_plus", "+/+"),
    ("leading_slash_plus", "/+"),
    ("plus_then_hash", "+/tennis/#"),
    ("empty_levels", "a//#"),
    ("dollar_sys_hash", "$SYS/#"),
    ("only_slash", "/"),
    ("plus_trailing_empty", "+/"),
]

INVALID_FILTERS = [
    ("empty", ""),
    ("hash_not_last", "sport/tennis/#/ranking"),
    ("hash_in_level", "sport/tennis#"),
    ("hash_prefix_in_level", "#sport"),
    ("plus_in_level", "sport+"),
    ("plus_suffix_level", "sport/+tennis"),
    ("double_hash", "#/#"),
    ("hash_plus_level", "+#"),
    ("nul", "a/\x00"),
    ("too_long", "a/" * 40000),
]

# machines running several suites at once are slow: no per-example deadline
SLOW_OK = [HealthCheck.too_slow]


@pytest.mark.parametrize(("name"), [n for _, n in VALID_NAMES], ids=[i for i, _ in VALID_NAMES])
def test_valid_topic_names_pass(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", [n for _, n in INVALID_NAMES], ids=[i for i, _ in INVALID_NAMES])
def test_invalid_topic_names_raise_0x90(name: str) -> None:
    with pytest.raises(TopicError) as caught:
        validate_topic_name(name)
    assert caught.value.reason_code == TOPIC_NAME_INVALID == 0x90
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("flt", [f for _, f in VALID_FILTERS], ids=[i for i, _ in VALID_FILTERS])
def test_valid_topic_filters_pass(flt: str) -> None:
    validate_topic_filter(flt)


@pytest.mark.parametrize(
    "flt", [f for _, f in INVALID_FILTERS], ids=[i for i, _ in INVALID_FILTERS]
)
def test_invalid_topic_filters_raise_0x8f(flt: str) -> None:
    with pytest.raises(TopicError) as caught:
        validate_topic_filter(flt)
    assert caught.value.reason_code == TOPIC_FILTER_INVALID == 0x8F


@pytest.mark.parametrize(
    ("text", "max_length", "ok"),
    [("abcd", 4, True), ("abcde", 4, False), ("éé", 4, True), ("ééa", 4, False)],
    ids=["ascii_at_limit", "ascii_over", "utf8_at_limit", "utf8_over"],
)
def test_max_length_counts_utf8_bytes(text: str, max_length: int, ok: bool) -> None:
    for validate in (validate_topic_name, validate_topic_filter):
        if ok:
            validate(text, max_length=max_length)
        else:
            with pytest.raises(TopicError):
                validate(text, max_length=max_length)


@pytest.mark.parametrize(
    ("text", "max_levels", "ok"),
    [("a/b/c", 3, True), ("a/b/c/d", 3, False), ("/", 2, True), ("//", 2, False), ("a/b", 0, True)],
    ids=["at_limit", "over", "empty_levels_at_limit", "empty_levels_over", "zero_is_unlimited"],
)
def test_max_levels(text: str, max_levels: int, ok: bool) -> None:
    for validate in (validate_topic_name, validate_topic_filter):
        if ok:
            validate(text, max_levels=max_levels)
        else:
            with pytest.raises(TopicError):
                validate(text, max_levels=max_levels)


SHARED_OK = [
    ("plain_literal", "a/b", (None, "a/b")),
    ("plain_wildcard", "a/+/#", (None, "a/+/#")),
    ("share_literal", "$share/g1/a/b", ("g1", "a/b")),
    ("share_hash", "$share/consumers/#", ("consumers", "#")),
    ("share_plus", "$share/g/+/x", ("g", "+/x")),
    ("share_leading_slash", "$share/g//finance", ("g", "/finance")),
    ("share_sys", "$share/g/$SYS/#", ("g", "$SYS/#")),
    ("dollar_share_alone_is_plain", "$share", (None, "$share")),
    ("nested_share_text", "$share/g/$share/h/t", ("g", "$share/h/t")),
]

SHARED_BAD = [
    ("no_filter", "$share/g"),
    ("empty_group", "$share//a"),
    ("empty_filter", "$share/g/"),
    ("plus_group", "$share/+/a"),
    ("hash_group", "$share/#/a"),
    ("plus_inside_group", "$share/g+/a"),
    ("nul_group", "$share/g\x00/a"),
    ("bad_inner_filter", "$share/g/a/#/b"),
    ("bad_plain_filter", "a/b#"),
    ("empty_plain", ""),
    ("prefix_only", "$share/"),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [(t, e) for _, t, e in SHARED_OK],
    ids=[i for i, _, _ in SHARED_OK],
)
def test_parse_shared_valid(text: str, expected: tuple[str | None, str]) -> None:
    assert parse_shared(text) == expected


@pytest.mark.parametrize("text", [t for _, t in SHARED_BAD], ids=[i for i, _ in SHARED_BAD])
def test_parse_shared_invalid(text: str) -> None:
    with pytest.raises(TopicError) as caught:
        parse_shared(text)
    assert caught.value.reason_code == TOPIC_FILTER_INVALID


def test_parse_shared_limits_apply_to_inner_filter() -> None:
    assert parse_shared("$share/g/a/b", max_levels=2) == ("g", "a/b")
    with pytest.raises(TopicError):
        parse_shared("$share/g/a/b/c", max_levels=2)
    with pytest.raises(TopicError):
        parse_shared("$share/g/" + "x" * 10, max_length=12)


MATCH_CASES = [
    ("hash_matches_parent", "sport/tennis/player1/#", "sport/tennis/player1", True),
    ("hash_matches_child", "sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    (
        "hash_matches_grandchild",
        "sport/tennis/player1/#",
        "sport/tennis/player1/score/wimbledon",
        True,
    ),
    ("hash_not_sibling", "sport/tennis/player1/#", "sport/tennis/player2", False),
    ("sport_hash_matches_sport", "sport/#", "sport", True),
    ("hash_alone", "#", "any/thing/at/all", True),
    ("hash_alone_single", "#", "x", True),
    ("hash_alone_leading_slash", "#", "/finance", True),
    ("plus_one_level", "sport/tennis/+", "sport/tennis/player1", True),
    ("plus_not_two_levels", "sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("plus_not_zero_levels", "sport/tennis/+", "sport/tennis", False),
    ("plus_matches_empty_level", "sport/+", "sport/", True),
    ("plus_alone_not_parent", "sport/+", "sport", False),
    ("plus_plus_leading_slash", "+/+", "/finance", True),
    ("slash_plus_leading_slash", "/+", "/finance", True),
    ("plus_not_leading_slash", "+", "/finance", False),
    ("plus_single", "+", "finance", True),
    ("plus_middle", "sport/+/player1", "sport/tennis/player1", True),
    ("plus_then_hash", "+/tennis/#", "sport/tennis/player1", True),
    ("literal_equal", "a/b", "a/b", True),
    ("literal_case_sensitive", "a/b", "A/b", False),
    ("literal_prefix", "a/b", "a/b/c", False),
    ("literal_longer", "a/b/c", "a/b", False),
    ("sys_not_by_hash", "#", "$SYS/x", False),
    ("sys_not_by_plus", "+/x", "$SYS/x", False),
    ("sys_not_by_plus_hash", "+/#", "$SYS/x", False),
    ("sys_by_sys_hash", "$SYS/#", "$SYS/x", True),
    ("sys_by_sys_plus", "$SYS/+", "$SYS/x", True),
    ("sys_literal", "$SYS/x", "$SYS/x", True),
    ("dollar_inside_ok", "a/+", "a/$x", True),
    ("dollar_inside_hash_ok", "a/#", "a/$x/y", True),
]


@pytest.mark.parametrize(
    ("flt", "topic", "expected"),
    [(f, t, e) for _, f, t, e in MATCH_CASES],
    ids=[i for i, _, _, _ in MATCH_CASES],
)
def test_filter_matches_spec_examples(flt: str, topic: str, expected: bool) -> None:
    validate_topic_filter(flt)
    validate_topic_name(topic)
    assert filter_matches(flt, topic) is expected


def _as_regex(flt: str) -> re.Pattern[str]:
    """An independent oracle: the filter as a regular expression."""
    levels = flt.split("/")
    parts: list[str] = []
    for index, level in enumerate(levels):
        sep = "" if index == 0 else "/"
        if level == "#":
            parts.append("(?:/.*)?" if index else ".*")
            break
        parts.append(sep + ("[^/]*" if level == "+" else re.escape(level)))
    pattern = "".join(parts)
    if flt[:1] in ("+", "#"):
        pattern = "(?!\\$)" + pattern
    return re.compile(pattern)


LEVELS = st.sampled_from(["a", "b", "", "$SYS", "$x"])
FILTER_LEVELS = st.sampled_from(["a", "b", "", "+", "$SYS"])
TOPICS = st.lists(LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)
FILTERS = st.builds(
    lambda levels, hash_tail: "/".join(levels + (["#"] if hash_tail else [])),
    st.lists(FILTER_LEVELS, min_size=0, max_size=4),
    st.booleans(),
).filter(bool)


@settings(deadline=None, suppress_health_check=SLOW_OK)
@given(flt=FILTERS, topic=TOPICS)
def test_filter_matches_agrees_with_regex_oracle(flt: str, topic: str) -> None:
    validate_topic_filter(flt)
    validate_topic_name(topic)
    assert filter_matches(flt, topic) is (_as_regex(flt).fullmatch(topic) is not None)


@settings(deadline=None, suppress_health_check=SLOW_OK)
@given(topic=TOPICS)
def test_every_topic_is_a_filter_matching_itself(topic: str) -> None:
    validate_topic_filter(topic)
    assert filter_matches(topic, topic)


def _filter_is_valid(flt: str) -> bool:
    """Independent statement of MQTT 5.0 §4.7.1 for strings without NUL or length issues."""
    if not flt:
        return False
    levels = flt.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return True


TEXT = st.text(alphabet=st.sampled_from(["a", "/", "+", "#", "$", "é"]), max_size=8)


@settings(deadline=None, suppress_health_check=SLOW_OK)
@given(text=TEXT)
def test_validation_agrees_with_the_rules(text: str) -> None:
    filter_ok = _filter_is_valid(text)
    name_ok = bool(text) and "+" not in text and "#" not in text
    try:
        validate_topic_filter(text)
    except TopicError:
        assert not filter_ok
    else:
        assert filter_ok
    try:
        validate_topic_name(text)
    except TopicError:
        assert not name_ok
    else:
        assert name_ok
    if filter_ok:
        assert parse_shared(f"$share/group/{text}") == ("group", text)
    else:
        with pytest.raises(TopicError):
            parse_shared(f"$share/group/{text}")

"""Cover/overlap of ACL filters checked against brute-force enumeration of topics."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from xmq.auth.acl_patterns import (
    compile_pattern,
    covers_filter,
    matches_topic,
    overlaps_filter,
    parse_filter,
)

LEVELS = ["a", "b", "$x", ""]
TOPICS = [
    "/".join(levels)
    for length in range(1, 5)
    for levels in itertools.product(LEVELS, repeat=length)
]


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.sampled_from([*LEVELS, "+"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        levels = [*levels[:2], "#"]
    return "/".join(levels)


@settings(max_examples=200, deadline=None)
@given(rule=filters(), requested=filters())
def test_cover_and_overlap_agree_with_enumeration(rule: str, requested: str) -> None:
    pattern = compile_pattern(rule, "u", "c")
    assert pattern is not None
    wanted = parse_filter(requested)
    by_request = [topic for topic in TOPICS if matches_topic(wanted, topic)]
    by_rule = {topic for topic in TOPICS if matches_topic(pattern, topic)}
    assert covers_filter(pattern, wanted) == all(topic in by_rule for topic in by_request)
    assert overlaps_filter(pattern, wanted) == any(topic in by_rule for topic in by_request)

"""Topic-filter patterns of ACL rules: `%u`/`%c` substitution and literal-safe matching.

A pattern is a tuple of levels; each level is a wildcard (`+`, `#`) or a literal string.
Substituted user names and client ids are always literal: a `+`, `#` or `/` inside them
never acts as a wildcard or creates a wildcard level (a `/` spans literal levels).
"""

from __future__ import annotations

from typing import Final

PLUS: Final = 1
HASH: Final = 2
LITERAL: Final = 0

Level = tuple[int, str]
Pattern = tuple[Level, ...]

_PLUS_LEVEL: Final[Level] = (PLUS, "+")
_HASH_LEVEL: Final[Level] = (HASH, "#")


class PatternError(ValueError):
    """An ACL topic filter that is not a valid MQTT topic filter."""


def validate_rule_filter(topic_filter: str) -> None:
    """Raise PatternError unless `topic_filter` is a valid filter (with `%u`/`%c` allowed)."""
    if not topic_filter:
        raise PatternError("empty topic filter")
    if "\x00" in topic_filter:
        raise PatternError("NUL in topic filter")
    if len(topic_filter.encode()) > 65535:
        raise PatternError("topic filter too long")
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if level == "#" and index != len(levels) - 1:
            raise PatternError("'#' must be the last level")
        if level not in ("+", "#") and ("+" in level or "#" in level):
            raise PatternError("wildcards must fill a whole level")


def parse_filter(topic_filter: str) -> Pattern:
    """A requested subscription filter as pattern levels (its wildcards are wildcards)."""
    return tuple(
        _PLUS_LEVEL if level == "+" else _HASH_LEVEL if level == "#" else (LITERAL, level)
        for level in topic_filter.split("/")
    )


def compile_pattern(topic_filter: str, username: str | None, client_id: str) -> Pattern | None:
    """The rule filter with `%u` and `%c` substituted. None when it uses `%u` and there is
    no user name (the rule then applies to nobody)."""
    if "%u" in topic_filter and username is None:
        return None
    levels: list[Level] = []
    for level in topic_filter.split("/"):
        if level == "+":
            levels.append(_PLUS_LEVEL)
        elif level == "#":
            levels.append(_HASH_LEVEL)
        elif "%" in level:
            text = _substitute(level, username or "", client_id)
            levels.extend((LITERAL, part) for part in text.split("/"))
        else:
            levels.append((LITERAL, level))
    return tuple(levels)


def _substitute(level: str, username: str, client_id: str) -> str:
    # Single pass, so a user name containing "%c" is not substituted again.
    out: list[str] = []
    index = 0
    while index < len(level):
        pair = level[index : index + 2]
        if pair == "%u":
            out.append(username)
            index += 2
        elif pair == "%c":
            out.append(client_id)
            index += 2
        else:
            out.append(level[index])
            index += 1
    return "".join(out)


def _dollar_guard(rule_first: Level, other_first: Level) -> bool:
    """MQTT §4.7.2: a leading wildcard never matches a `$` topic level."""
    return rule_first[0] != LITERAL and other_first[0] == LITERAL and other_first[1][:1] == "$"


def matches_topic(pattern: Pattern, topic: str) -> bool:
    """Does the rule pattern match a topic name?"""
    return matches_levels(pattern, topic.split("/"))


def matches_levels(pattern: Pattern, names: list[str]) -> bool:
    """`matches_topic` for a topic already split into its levels."""
    if pattern and pattern[0][0] != LITERAL and names[0][:1] == "$":
        return False
    for index, (kind, text) in enumerate(pattern):
        if kind == HASH:
            return True
        if index >= len(names):
            return False
        if kind == LITERAL and text != names[index]:
            return False
    return len(pattern) == len(names)


def _hash_tail(levels: Pattern, start: int) -> bool:
    return len(levels) == start + 1 and levels[start][0] == HASH


def covers_filter(pattern: Pattern, requested: Pattern) -> bool:
    """Is every topic the requested filter matches also matched by the rule pattern?"""
    if pattern and requested and _dollar_guard(pattern[0], requested[0]):
        return False
    for index, (kind, text) in enumerate(pattern):
        if kind == HASH:
            return True
        if index >= len(requested):
            return False  # a shorter request is only covered by a trailing '#' (handled above)
        other_kind, other_text = requested[index]
        if other_kind == HASH:
            return False
        if kind == LITERAL and (other_kind != LITERAL or other_text != text):
            return False
    return len(pattern) == len(requested)


def overlaps_filter(pattern: Pattern, requested: Pattern) -> bool:
    """Could some topic be matched by both the rule pattern and the requested filter?"""
    if (
        pattern
        and requested
        and (_dollar_guard(pattern[0], requested[0]) or _dollar_guard(requested[0], pattern[0]))
    ):
        return False
    for index in range(max(len(pattern), len(requested))):
        if index >= len(pattern):
            return _hash_tail(requested, index)
        if index >= len(requested):
            return _hash_tail(pattern, index)
        kind, text = pattern[index]
        other_kind, other_text = requested[index]
        if kind == HASH or other_kind == HASH:
            return True
        if kind == LITERAL and other_kind == LITERAL and text != other_text:
            return False
    return True


def strip_shared_prefix(topic_filter: str) -> str:
    """`$share/<group>/<filter>` -> `<filter>`; other filters unchanged."""
    if topic_filter.startswith("$share/"):
        _, _, rest = topic_filter[len("$share/") :].partition("/")
        return rest
    return topic_filter

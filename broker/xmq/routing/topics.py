"""Topic names and topic filters: validation, `$share` parsing and the reference matcher.

MQTT topics are `/`-separated levels; empty levels are legal (`/finance` has two levels, the
first empty). Filters may use `+` (exactly one whole level) and `#` (the last, whole level;
zero or more levels, so `a/#` also matches `a`). Topics starting with `$` are never matched by
a filter whose first level is a wildcard (MQTT 5.0 §4.7.2).

Lengths are counted in UTF-8 bytes, as on the wire. Well-formed UTF-8 (no surrogates) is the
codec's business; a string holding a lone surrogate is rejected here too when it is measured.
"""

from __future__ import annotations

from typing import Final

TOPIC_FILTER_INVALID: Final = 0x8F
TOPIC_NAME_INVALID: Final = 0x90
SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: Final = 0x9E

SINGLE_LEVEL_WILDCARD: Final = "+"
MULTI_LEVEL_WILDCARD: Final = "#"
LEVEL_SEPARATOR: Final = "/"
SHARE_PREFIX: Final = "$share/"
MAX_STRING_LENGTH: Final = 65535


class TopicError(ValueError):
    """An invalid topic name or topic filter; `reason_code` is the MQTT 5 reason to send."""

    def __init__(self, message: str, reason_code: int) -> None:
        super().__init__(message)
        self.reason_code = reason_code


def _encoded_length(text: str, reason_code: int) -> int:
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise TopicError("not well-formed UTF-8 (surrogate code point)", reason_code) from exc


def _check_common(text: str, what: str, max_length: int, max_levels: int, code: int) -> None:
    """The checks names and filters share; the slow path, with a precise message."""
    if not text:
        raise TopicError(f"{what} is empty", code)
    if "\x00" in text:
        raise TopicError(f"{what} contains U+0000", code)
    if len(text) > max_length or _encoded_length(text, code) > max_length:
        raise TopicError(f"{what} is longer than {max_length} bytes", code)
    if max_levels > 0 and text.count(LEVEL_SEPARATOR) >= max_levels:
        raise TopicError(f"{what} has more than {max_levels} levels", code)


def validate_topic_name(
    name: str, max_length: int = MAX_STRING_LENGTH, max_levels: int = 0
) -> None:
    """Raise `TopicError` (0x90) unless `name` may be published to.

    `max_levels` 0 means unlimited. Called for every PUBLISH, so the common case is a handful
    of C-level scans.
    """
    if "+" in name or "#" in name:
        raise TopicError("topic name contains a wildcard", TOPIC_NAME_INVALID)
    if (
        not name
        or "\x00" in name
        or len(name) > max_length
        or not name.isascii()
        or (max_levels > 0 and name.count(LEVEL_SEPARATOR) >= max_levels)
    ):
        _check_common(name, "topic name", max_length, max_levels, TOPIC_NAME_INVALID)


def validate_topic_filter(
    flt: str, max_length: int = MAX_STRING_LENGTH, max_levels: int = 0
) -> None:
    """Raise `TopicError` (0x8F) unless `flt` is a well-formed (non-shared) topic filter.

    `$share/...` strings are syntactically plain filters too; use `parse_shared` for
    subscription requests, which validates both kinds.
    """
    _check_common(flt, "topic filter", max_length, max_levels, TOPIC_FILTER_INVALID)
    if "+" not in flt and "#" not in flt:
        return
    levels = flt.split(LEVEL_SEPARATOR)
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level:
            if level != MULTI_LEVEL_WILDCARD:
                raise TopicError("'#' must occupy a whole level", TOPIC_FILTER_INVALID)
            if index != last:
                raise TopicError("'#' must be the last level", TOPIC_FILTER_INVALID)
        elif "+" in level and level != SINGLE_LEVEL_WILDCARD:
            raise TopicError("'+' must occupy a whole level", TOPIC_FILTER_INVALID)


def has_wildcard(flt: str) -> bool:
    """True when `flt` contains `+` or `#` (it may match more than one topic)."""
    return "+" in flt or "#" in flt


def parse_shared(
    flt: str, max_length: int = MAX_STRING_LENGTH, max_levels: int = 0
) -> tuple[str | None, str]:
    """Split a subscription filter into `(share_name, topic_filter)` and validate both.

    `$share/<group>/<filter>` gives `(group, filter)`; any other filter gives `(None, flt)`.
    The share name must be non-empty without `+`, `#` or `/`; the inner filter must be a
    valid filter (`max_levels` applies to it). Raises `TopicError` with 0x8F.
    """
    if not flt.startswith(SHARE_PREFIX):
        validate_topic_filter(flt, max_length, max_levels)
        return None, flt
    group, separator, inner = flt[len(SHARE_PREFIX) :].partition(LEVEL_SEPARATOR)
    if not separator:
        raise TopicError("shared subscription has no topic filter", TOPIC_FILTER_INVALID)
    if not group:
        raise TopicError("shared subscription has an empty share name", TOPIC_FILTER_INVALID)
    if "+" in group or "#" in group:
        raise TopicError("share name contains a wildcard", TOPIC_FILTER_INVALID)
    if "\x00" in group:
        raise TopicError("share name contains U+0000", TOPIC_FILTER_INVALID)
    if len(flt) > max_length or _encoded_length(flt, TOPIC_FILTER_INVALID) > max_length:
        raise TopicError(f"topic filter is longer than {max_length} bytes", TOPIC_FILTER_INVALID)
    validate_topic_filter(inner, max_length, max_levels)
    return group, inner


def filter_matches(flt: str, topic: str) -> bool:
    """Reference matcher: does the (valid, non-shared) filter `flt` match topic name `topic`?

    Straightforward and unoptimised on purpose: tests and the retained index rely on it.
    """
    if topic.startswith("$") and flt[:1] in ("+", "#"):
        return False
    filter_levels = flt.split(LEVEL_SEPARATOR)
    topic_levels = topic.split(LEVEL_SEPARATOR)
    for index, level in enumerate(filter_levels):
        if level == MULTI_LEVEL_WILDCARD:
            return True
        if index >= len(topic_levels):
            return False
        if level != SINGLE_LEVEL_WILDCARD and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)

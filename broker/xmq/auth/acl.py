"""ACL rules and their evaluation, with a per-client decision cache.

Evaluation: the rules that apply to a client (its own, its groups', and rules for
everyone) are ordered by priority (highest first), deny before allow at equal priority,
then in definition order. The first rule whose action, topic filter and conditions
match decides; when none does, the `no_match` default decides (deny unless configured).

- Publish: the rule's filter must match the topic name. Topics starting with `$`
  are never writable, whatever the rules say.
- Subscribe (`$share/<group>/` is stripped first): an allow rule must cover the whole
  requested filter (every topic it can match); a deny rule applies as soon as the
  requested filter overlaps it, so `#` cannot be used to get round `deny secret/#`.
- Conditions: `max_qos` (the request's QoS must not exceed it) and, for publish,
  `retain` (the request's retain flag must equal it). A rule whose conditions are not
  met is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from xmq.auth.acl_patterns import (
    Pattern,
    compile_pattern,
    covers_filter,
    matches_levels,
    overlaps_filter,
    parse_filter,
    strip_shared_prefix,
    validate_rule_filter,
)
from xmq.core.auth_ports import is_reserved_topic

_CACHE_LIMIT: Final = 4096


class Permission(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


class Action(StrEnum):
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class AclRule:
    """One rule. `username` and `group` select whom it applies to (neither: everyone)."""

    permission: Permission
    action: Action
    topic_filter: str
    priority: int = 0
    max_qos: int | None = None
    retain: bool | None = None
    username: str | None = None
    group: str | None = None
    rule_id: int | None = None

    def __post_init__(self) -> None:
        validate_rule_filter(self.topic_filter)
        if self.max_qos is not None and self.max_qos not in (0, 1, 2):
            raise ValueError("max_qos must be 0, 1 or 2")
        if self.username is not None and self.group is not None:
            raise ValueError("a rule is for a user or a group, not both")

    def applies_to(self, username: str | None, groups: Iterable[str]) -> bool:
        if self.username is not None:
            return self.username == username
        if self.group is not None:
            return self.group in groups
        return True


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    allow: bool
    publish: bool
    subscribe: bool
    pattern: Pattern
    max_qos: int | None
    retain: bool | None


def _order_key(indexed: tuple[int, AclRule]) -> tuple[int, int, int]:
    index, rule = indexed
    return (-rule.priority, 0 if rule.permission is Permission.DENY else 1, index)


class RuleAcl:
    """ClientAcl for one client: rules compiled with its user name and client id."""

    __slots__ = ("_rules", "_no_match_allows", "_cache")

    def __init__(
        self,
        rules: Iterable[AclRule],
        *,
        username: str | None,
        groups: Iterable[str],
        client_id: str,
        no_match_allows: bool = False,
    ) -> None:
        group_set = frozenset(groups)
        applicable = [
            (index, rule)
            for index, rule in enumerate(rules)
            if rule.applies_to(username, group_set)
        ]
        compiled: list[_CompiledRule] = []
        for _, rule in sorted(applicable, key=_order_key):
            pattern = compile_pattern(rule.topic_filter, username, client_id)
            if pattern is None:
                continue
            compiled.append(
                _CompiledRule(
                    allow=rule.permission is Permission.ALLOW,
                    publish=rule.action is not Action.SUBSCRIBE,
                    subscribe=rule.action is not Action.PUBLISH,
                    pattern=pattern,
                    max_qos=rule.max_qos,
                    retain=rule.retain,
                )
            )
        self._rules = tuple(compiled)
        self._no_match_allows = no_match_allows
        self._cache: dict[tuple[bool, str, int, bool], bool] = {}

    def _remember(self, key: tuple[bool, str, int, bool], decision: bool) -> bool:
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = decision
        return decision

    def can_publish(self, topic: str, qos: int, retain: bool) -> bool:
        key = (True, topic, qos, retain)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if is_reserved_topic(topic):
            return self._remember(key, False)
        names = topic.split("/")
        for rule in self._rules:
            if not rule.publish or (rule.max_qos is not None and qos > rule.max_qos):
                continue
            if rule.retain is not None and rule.retain != retain:
                continue
            if matches_levels(rule.pattern, names):
                return self._remember(key, rule.allow)
        return self._remember(key, self._no_match_allows)

    def can_subscribe(self, topic_filter: str, qos: int) -> bool:
        key = (False, topic_filter, qos, False)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        requested = parse_filter(strip_shared_prefix(topic_filter))
        for rule in self._rules:
            if not rule.subscribe or (rule.max_qos is not None and qos > rule.max_qos):
                continue
            if rule.allow:
                if covers_filter(rule.pattern, requested):
                    return self._remember(key, True)
            elif overlaps_filter(rule.pattern, requested):
                return self._remember(key, False)
        return self._remember(key, self._no_match_allows)


class DenyAll:
    """ClientAcl refusing everything (used when rules could not be loaded)."""

    __slots__ = ()

    def can_publish(self, topic: str, qos: int, retain: bool) -> bool:
        return False

    def can_subscribe(self, topic_filter: str, qos: int) -> bool:
        return False


def check_access(
    rules: Iterable[AclRule],
    *,
    username: str | None,
    groups: Iterable[str],
    client_id: str,
    topic: str,
    action: Action,
    qos: int = 0,
    retain: bool = False,
    no_match_allows: bool = False,
) -> bool:
    """One decision, as the broker would make it (`xmq acl check`). BOTH = publish and subscribe."""
    acl = RuleAcl(
        rules,
        username=username,
        groups=groups,
        client_id=client_id,
        no_match_allows=no_match_allows,
    )
    publish_ok = acl.can_publish(topic, qos, retain)
    subscribe_ok = acl.can_subscribe(topic, qos)
    if action is Action.PUBLISH:
        return publish_ok
    if action is Action.SUBSCRIBE:
        return subscribe_ok
    return publish_ok and subscribe_ok

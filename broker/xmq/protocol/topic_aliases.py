"""Topic aliases (MQTT 5 §3.3.2.3.4), both directions.

Inbound: the client assigns aliases up to our Topic Alias Maximum; a PUBLISH with an empty
topic must name a known alias. Outbound: we assign aliases up to the client's maximum and,
once all are taken, replace the least recently used one.
"""

from __future__ import annotations

from collections import OrderedDict

from xmq.codec.errors import ProtocolViolation, TopicAliasInvalid


class InboundTopicAliases:
    """Aliases a client has set towards the broker."""

    __slots__ = ("_aliases", "maximum")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._aliases: dict[int, str] | None = None  # made on the first alias set (most never)

    def resolve(self, topic: str, alias: int | None) -> str:
        """Return the topic name a PUBLISH refers to, recording a new alias when set.

        Raises ``TopicAliasInvalid`` (0x94) for alias 0 or above the maximum, and
        ``ProtocolViolation`` (0x82) for an empty topic with an unknown alias.
        """
        if alias is None:
            if not topic:
                raise ProtocolViolation("empty topic name without a topic alias")
            return topic
        if alias == 0 or alias > self.maximum:
            raise TopicAliasInvalid(f"topic alias {alias} outside 1..{self.maximum}")
        aliases = self._aliases
        if topic:
            if aliases is None:
                aliases = self._aliases = {}
            aliases[alias] = topic
            return topic
        known = aliases.get(alias) if aliases is not None else None
        if known is None:
            raise ProtocolViolation(f"topic alias {alias} was never set")
        return known


class OutboundTopicAliases:
    """Aliases the broker assigns towards a client (bounded by the client's maximum)."""

    __slots__ = ("_by_topic", "maximum")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._by_topic: OrderedDict[str, int] = OrderedDict()

    def assign(self, topic: str) -> tuple[int, bool]:
        """Return ``(alias, is_new)``: send the topic name too when ``is_new`` is true.

        Returns ``(0, True)`` when aliases are disabled (maximum 0).
        """
        if self.maximum == 0:
            return 0, True
        alias = self._by_topic.get(topic)
        if alias is not None:
            self._by_topic.move_to_end(topic)
            return alias, False
        if len(self._by_topic) < self.maximum:
            alias = len(self._by_topic) + 1
        else:
            _, alias = self._by_topic.popitem(last=False)
        self._by_topic[topic] = alias
        return alias, True

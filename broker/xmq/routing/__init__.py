"""xmq.routing: topic/filter validation, subscription tries, shared groups, retained index.

Sans-IO: stdlib only, no asyncio, no sockets.
"""

from __future__ import annotations

from xmq.routing.filter_trie import MatchCache
from xmq.routing.retained import RetainedStore
from xmq.routing.shared_tree import SharedGroup, SharedSubscriptions
from xmq.routing.subscription_tree import SubscriptionTree
from xmq.routing.topics import (
    TopicError,
    filter_matches,
    has_wildcard,
    parse_shared,
    validate_topic_filter,
    validate_topic_name,
)

__all__ = [
    "MatchCache",
    "RetainedStore",
    "SharedGroup",
    "SharedSubscriptions",
    "SubscriptionTree",
    "TopicError",
    "filter_matches",
    "has_wildcard",
    "parse_shared",
    "validate_topic_filter",
    "validate_topic_name",
]

"""Which Redis failures pass by themselves (the counters of failures and retries:
:mod:`xmq.store.redis_stats`, re-exported here).

Transient (a write is sent again after a backoff): a lost connection (reset, refused, a connect
that timed out) and the error replies of a Redis that cannot take the command *now*:
``LOADING`` (a restarted Redis reading its AOF / RDB), ``BUSY`` (a script running too long),
``TRYAGAIN`` and ``CLUSTERDOWN`` (Redis Cluster resharding / failing over), ``MASTERDOWN`` (a
replica whose master link is down), ``READONLY`` (a master demoted to replica during a failover:
the connection is dropped so the next one finds the new master), ``NOSCRIPT`` (a restarted or
new master lost the script cache: sent again as ``EVAL``). An error reply means Redis did not
run the command, so sending it again applies it once; a lost connection leaves it unknown
(a record push is re-sent as push-if-absent: ``FENCED_WRITES``' op ``R``). Every other
error reply (``WRONGTYPE``, ``OOM``, a script error, ``FENCED``: the writing run lost its lease)
is final.
"""

from __future__ import annotations

from xmq.store.redis_stats import ROUND_TRIP_BOUNDS, RedisStats
from xmq.store.resp_connection import RedisConnectionLost, RedisReplyError

__all__ = [
    "NOSCRIPT",
    "ROUND_TRIP_BOUNDS",
    "TRANSIENT_REPLIES",
    "RedisStats",
    "RedisWriteFailed",
    "error_kind",
    "is_transient",
]

TRANSIENT_REPLIES = ("LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY")
NOSCRIPT = "NOSCRIPT"


class RedisWriteFailed(Exception):  # noqa: N818 - the outcome of a write, named as such
    """A write Redis did not take: an error reply that is final, or a transient failure that
    lasted longer than the retry window."""


def error_kind(error: BaseException) -> str:
    """A short label for metrics and logs: ``loading``, ``connection_lost``, ``timeout``..."""
    if isinstance(error, RedisReplyError):
        word = str(error).split(" ", 1)[0]
        return word.lower() if word.isalpha() and word.isupper() else "error"
    if isinstance(error, RedisConnectionLost):
        return "connection_lost"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(error, OSError):
        return "connect_failed"
    return type(error).__name__.lower()


def is_transient(error: BaseException) -> bool:
    """True for a failure that a later attempt may not meet (see the module doc)."""
    if isinstance(error, RedisConnectionLost):
        return True
    if isinstance(error, RedisReplyError):
        text = str(error)
        return text.startswith(TRANSIENT_REPLIES) or text.startswith(NOSCRIPT)
    return False

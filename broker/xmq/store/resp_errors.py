"""The exceptions of the Redis connection (:mod:`xmq.store.resp_connection`).

Apart from it because the connection is compiled (mypyc) and a compiled module cannot define a
subclass of a built-in exception other than ``Exception`` (``ConnectionError`` here).
"""

from __future__ import annotations


class RedisReplyError(Exception):
    """An error reply (``-ERR ...``) to one command."""


class RedisConnectionLost(ConnectionError):  # noqa: N818 - a ConnectionError, named as such
    """The connection closed with commands still waiting for replies."""


class NoRedisMaster(ConnectionError):  # noqa: N818 - a ConnectionError, named as such
    """No sentinel named a master, or the server it named is not (or no more) a master."""

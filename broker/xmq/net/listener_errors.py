"""The error of a listener that could not start (re-exported by ``net.listeners``).

Its own module because ``net.listeners`` is compiled (``xmq.native_build``) and a compiled
class cannot inherit from ``OSError``.
"""

from __future__ import annotations


class ListenerStartError(OSError):
    """A listener could not start (bind, certificates); the message names it and its address."""

"""Ports between the broker core and the network adapter.

The network adapter (``xmq.net``) owns sockets; the core sees one ``ClientLink`` per
connection and never imports asyncio transports or sockets directly. The session's side of a
connection, ``SessionClient``, is a compiled base class in ``core.session_client``, and so is
``ClientLink`` in ``core.client_link`` (both re-exported here).
"""

from __future__ import annotations

from xmq.core.client_link import ClientLink as ClientLink
from xmq.core.session_client import SessionClient as SessionClient

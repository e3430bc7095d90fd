"""Node links made: the listening port, a dial to a peer, and probes of a peer's port.

A link is a ``PeerLink`` protocol on a TCP (or, with ``cluster.link_tls``, mutual-TLS)
connection; both ends then send HELLO (``link_hello``). The node with the smaller id dials
(``ClusterHub.connect_peers``). The probes tell a killed node (its port refuses at once) from
one that is alive behind a partition (a dial that goes unanswered): ``cluster.dead_peers``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any

from xmq.cluster.link_tls import TlsLinkServer, log_refused
from xmq.cluster.peer_link import PeerLink

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub

log = logging.getLogger("xmq.cluster")


async def listen(
    hub: ClusterHub, host: str, port: int
) -> tuple[asyncio.Server | TlsLinkServer, int]:
    """Accept node links on ``host:port``: the server and the port it bound."""
    loop = asyncio.get_running_loop()
    if hub.link_tls is not None:
        tls_server = TlsLinkServer(lambda: PeerLink(hub), hub.link_tls)
        return tls_server, await tls_server.start(host, port)
    server = await loop.create_server(
        lambda: PeerLink(hub), host=host, port=port, reuse_address=True
    )
    # (uvloop's ``sockets`` is a list, typeshed's a tuple: read untyped, the compiled
    # module checks a typed read)
    sockets: Any = getattr(server, "sockets")  # noqa: B009
    bound: int = sockets[0].getsockname()[1]
    return server, bound


async def dial(hub: ClusterHub, node: str, address: str) -> None:
    """Dial ``node`` at ``address`` (``host:port``); it is no longer ``dialing`` after."""
    host, _, port = address.rpartition(":")
    loop = asyncio.get_running_loop()
    tls = hub.link_tls
    try:
        async with asyncio.timeout(2.0):
            await loop.create_connection(
                lambda: PeerLink(hub),
                host,
                int(port),
                ssl=tls.client if tls is not None else None,
                ssl_handshake_timeout=2.0 if tls is not None else None,
            )
    except ssl.SSLError as error:
        log_refused("to", f"{node} at {address}", error)
    except (OSError, TimeoutError, ValueError) as error:
        log.debug("link to %s at %s failed: %s", node, address, error)
    finally:
        hub.dialing.discard(node)


async def reachable(address: str) -> bool:
    """Whether a node link port accepts connections (a killed node's refuses at once)."""
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection(host, int(port))
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    return True


async def refuses(address: str) -> bool:
    """Whether a node link port refuses connections (a killed node's, at once). A dial
    that goes unanswered is not a refusal: the node may be alive behind a partition."""
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection(host, int(port))
    except (ConnectionRefusedError, ValueError):
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False

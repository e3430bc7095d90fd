"""What a login carries to the authenticator and gets back: ``Credentials``, ``AuthDecision``.

Re-exported by ``core.auth_ports`` (their home in the API). Apart from the ports because this
module is compiled (``xmq.native_build``): one of each is built per login. In the interpreted
port module (``AuthDecision`` a dataclass) each cost an interpreted ``__init__`` per connect
(~1,600 instructions for ``Credentials``, ~1,000 for ``AuthDecision``), and the compiled login
read their fields through generic attribute lookups.
"""

from __future__ import annotations

from collections.abc import Callable


class Credentials:
    """What a CONNECT carried."""

    def __init__(
        self,
        client_id: str,
        username: str | None,
        password: bytes | None,
        peer: str | Callable[[], str],
        protocol_version: int,
    ) -> None:
        self.client_id = client_id
        self.username = username
        self.password = password
        self._peer = peer
        self.protocol_version = protocol_version
        """4 = MQTT 3.1.1 (3 for 3.1), 5 = MQTT 5.0."""

    @property
    def peer(self) -> str:
        """Source address as "ip:port" (used by brute-force guards).

        Given as a string or as a function asked on first use: a connection's address is
        formatted only when asked, and most authenticators (the anonymous default) never ask."""
        peer = self._peer
        if not isinstance(peer, str):
            peer = peer()
            self._peer = peer
        return peer

    def __repr__(self) -> str:  # the password is never shown
        version = self.protocol_version
        return f"Credentials({self.client_id!r}, {self.username!r}, protocol {version})"


class AuthDecision:
    """The outcome of an authentication (never changed once made)."""

    def __init__(
        self,
        reason_code: int,
        username: str | None = None,
        groups: tuple[str, ...] = (),
        reason_string: str | None = None,
    ) -> None:
        self.reason_code = reason_code
        """0 = success; else an MQTT 5 CONNACK reason: 0x86 bad user name or password,
        0x87 not authorized (e.g. disabled account), 0x88 server unavailable,
        0x8C bad authentication method, 0x9F connection rate exceeded (brute-force guard)."""
        self.username = username
        """The authenticated identity (may differ from the CONNECT's user name)."""
        self.groups = groups
        self.reason_string = reason_string

    @property
    def ok(self) -> bool:
        return self.reason_code == 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AuthDecision):
            return NotImplemented
        return (
            self.reason_code == other.reason_code
            and self.username == other.username
            and self.groups == other.groups
            and self.reason_string == other.reason_string
        )

    def __repr__(self) -> str:
        return (
            f"AuthDecision(reason_code={self.reason_code!r}, username={self.username!r}, "
            f"groups={self.groups!r}, reason_string={self.reason_string!r})"
        )

"""Authentication and authorisation ports used by the broker core.

The broker core talks to account stores only through these protocols. Adapters
(`xmq.auth.*`) implement them; the core implements `AuthEvents` so adapters can
tell it when accounts or rules change.

Reason codes are MQTT 5 values; the core maps them to MQTT 3.1.1 CONNACK codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from xmq.core.auth_records import AuthDecision as AuthDecision
from xmq.core.auth_records import Credentials as Credentials

# MQTT 5 reason codes used by the auth ports (spec §2.4).
AUTH_SUCCESS: Final = 0x00
AUTH_CONTINUE: Final = 0x18
AUTH_REAUTHENTICATE: Final = 0x19
AUTH_BAD_USERNAME_OR_PASSWORD: Final = 0x86
AUTH_NOT_AUTHORIZED: Final = 0x87
AUTH_SERVER_UNAVAILABLE: Final = 0x88
AUTH_BANNED: Final = 0x8A
AUTH_BAD_METHOD: Final = 0x8C
AUTH_CONNECTION_RATE_EXCEEDED: Final = 0x9F

RESERVED_TOPIC_PREFIX: Final = "$"
"""Topics starting with `$` ($SYS/..., the cluster's internal topics) are the
server's (MQTT 5 §4.7.2): clients may never publish to them."""


def is_reserved_topic(topic: str) -> bool:
    """True for a topic name no client may ever publish to."""
    return topic.startswith(RESERVED_TOPIC_PREFIX)


@dataclass(slots=True)
class AuthStep:
    """One step of enhanced authentication."""

    reason_code: int
    """0x18 continue (send AUTH), 0x00 success (send CONNACK/AUTH success), else failure."""
    data: bytes | None = None
    """Authentication Data to send back to the client."""
    decision: AuthDecision | None = None
    """Set when the exchange has finished (success or failure)."""


class AuthExchange(Protocol):
    """One enhanced-auth conversation (CONNECT ... AUTH ... or a re-authentication).

    The first call carries the CONNECT's (or re-auth AUTH's) Authentication Data;
    each later call carries the data of the client's next AUTH packet.
    """

    async def step(self, data: bytes | None) -> AuthStep: ...


class Authenticator(Protocol):
    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        """Plain CONNECT authentication (user name / password or anonymous)."""
        ...

    def start_exchange(self, method: str, credentials: Credentials) -> AuthExchange | None:
        """Start enhanced authentication; None = method not supported (0x8C)."""
        ...


class ClientAcl(Protocol):
    """Per-connection access decisions: synchronous and cached (hot path)."""

    def can_publish(self, topic: str, qos: int, retain: bool) -> bool: ...

    def can_subscribe(self, topic_filter: str, qos: int) -> bool: ...


class Authorizer(Protocol):
    async def acl_for(self, decision: AuthDecision, client_id: str) -> ClientAcl:
        """Load the rules of an authenticated client, once per login."""
        ...


class AuthEvents(Protocol):
    """Implemented by the broker core; adapters call it when accounts change."""

    def revoke(self, username: str, reason_code: int) -> None:
        """Disconnect every client of that user (e.g. 0x87 when disabled or deleted)."""
        ...

    def acl_changed(self, username: str | None) -> None:
        """Rules changed for that user (None = everyone): re-evaluate ACLs/subscriptions."""
        ...


class AllowAll:
    """ClientAcl and Authorizer allowing everything except writing reserved topics."""

    __slots__ = ()
    inline = True
    """``acl_for`` never waits: ``login_flow`` asks ``acl_now`` instead (no coroutine)."""

    def can_publish(self, topic: str, qos: int, retain: bool) -> bool:
        return not topic.startswith(RESERVED_TOPIC_PREFIX)  # is_reserved_topic, inlined

    def can_subscribe(self, topic_filter: str, qos: int) -> bool:
        return True

    def acl_now(self, decision: AuthDecision, client_id: str) -> ClientAcl:
        """``acl_for``'s answer, without a coroutine (an in-memory login, ``inline``)."""
        return self

    async def acl_for(self, decision: AuthDecision, client_id: str) -> ClientAcl:
        return self.acl_now(decision, client_id)


class AnonymousAuthenticator:
    """The embedded default without an account store.

    With `allow_anonymous=True` everyone is accepted (as the user name they gave,
    if any). With `allow_anonymous=False` a CONNECT without a user name is refused
    with 0x86; with one it is accepted (there is nothing to check it against).
    No enhanced authentication method is supported.
    """

    __slots__ = ("allow_anonymous",)
    inline = True
    """``authenticate`` never waits: ``login_flow`` asks ``decide`` instead (no coroutine)."""

    def __init__(self, allow_anonymous: bool = True) -> None:
        self.allow_anonymous = allow_anonymous

    def decide(self, credentials: Credentials) -> AuthDecision:
        """``authenticate``'s answer, without a coroutine (an in-memory login, ``inline``)."""
        if credentials.username is None and not self.allow_anonymous:
            return AuthDecision(
                AUTH_BAD_USERNAME_OR_PASSWORD, reason_string="anonymous access is disabled"
            )
        username = credentials.username
        if username is None:
            return _ANONYMOUS_ACCEPTED  # the same for every anonymous client (never changed)
        return AuthDecision(AUTH_SUCCESS, username)

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        return self.decide(credentials)

    def start_exchange(self, method: str, credentials: Credentials) -> AuthExchange | None:
        return None


_ANONYMOUS_ACCEPTED: Final = AuthDecision(AUTH_SUCCESS)


class NullAuthEvents:
    """AuthEvents that ignores every event (for tools and tests)."""

    __slots__ = ()

    def revoke(self, username: str, reason_code: int) -> None:
        return None

    def acl_changed(self, username: str | None) -> None:
        return None

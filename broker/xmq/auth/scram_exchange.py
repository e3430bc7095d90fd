"""MQTT 5 enhanced authentication with method "SCRAM-SHA-256" (an `AuthExchange`).

Step 1 carries the client-first message (CONNECT or AUTH Authentication Data) and
answers 0x18 Continue with server-first; step 2 carries client-final and answers
0x00 with server-final ("v=...", for the CONNACK/AUTH Authentication Data), or a
failure: 0x86 bad proof or unknown user, 0x87 disabled account, 0x88 store unreachable,
0x9F too many failed logins. The authenticated identity is the SCRAM user name.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable

from xmq.auth.accounts import (
    AccountRecord,
    AccountStoreUnavailableError,
    bad_credentials,
    decision_for,
)
from xmq.auth.login_guard import LoginGuard
from xmq.auth.scram import MECHANISM, ScramError, ScramServer
from xmq.core.auth_ports import (
    AUTH_CONNECTION_RATE_EXCEEDED,
    AUTH_CONTINUE,
    AUTH_SERVER_UNAVAILABLE,
    AUTH_SUCCESS,
    AuthDecision,
    AuthStep,
    Credentials,
)

AccountLookup = Callable[[str], Awaitable[AccountRecord | None]]
"""Find an account by user name; may raise AccountStoreUnavailableError."""

_FAKE_SALT_KEY = os.urandom(32)


def _fail(decision: AuthDecision, data: bytes | None = None) -> AuthStep:
    return AuthStep(decision.reason_code, data=data, decision=decision)


class ScramExchange:
    """One SCRAM-SHA-256 conversation against an account lookup."""

    __slots__ = ("_lookup", "_credentials", "_guard", "_server", "_record", "_stage")

    def __init__(
        self,
        lookup: AccountLookup,
        credentials: Credentials,
        guard: LoginGuard | None = None,
        nonce: str | None = None,
    ) -> None:
        self._lookup = lookup
        self._credentials = credentials
        self._guard = guard
        self._server = ScramServer(nonce)
        self._record: AccountRecord | None = None
        self._stage = 0

    async def step(self, data: bytes | None) -> AuthStep:
        stage, self._stage = self._stage, self._stage + 1
        if stage == 0:
            return await self._first(data)
        if stage == 1:
            return self._final(data)
        return _fail(bad_credentials("SCRAM exchange already finished"))

    async def _first(self, data: bytes | None) -> AuthStep:
        try:
            first = self._server.receive_client_first(data)
        except ScramError as failure:
            return _fail(bad_credentials(f"SCRAM: {failure}"), failure.server_final())
        peer = self._credentials.peer
        if self._guard is not None and not self._guard.allowed(first.username, peer):
            return _fail(
                AuthDecision(AUTH_CONNECTION_RATE_EXCEEDED, reason_string="too many failed logins")
            )
        try:
            self._record = await self._lookup(first.username)
        except AccountStoreUnavailableError:
            self._stage = 2
            return _fail(
                AuthDecision(AUTH_SERVER_UNAVAILABLE, reason_string="account store unavailable")
            )
        scram = self._record.scram if self._record is not None else None
        fake_salt = hmac.digest(_FAKE_SALT_KEY, first.username.encode(), hashlib.sha256)[:16]
        reply = self._server.server_first(scram, fake_salt=fake_salt)
        return AuthStep(AUTH_CONTINUE, data=reply)

    def _final(self, data: bytes | None) -> AuthStep:
        username = self._server.username
        try:
            reply = self._server.receive_client_final(data)
        except ScramError as failure:
            if self._guard is not None:
                self._guard.record_failure(username, self._credentials.peer)
            return _fail(bad_credentials(f"SCRAM: {failure}"), failure.server_final())
        record = self._record
        assert record is not None  # a proof only verifies against real credentials
        if self._guard is not None:
            self._guard.record_success(username, self._credentials.peer)
        decision = decision_for(record)
        if decision.reason_code != AUTH_SUCCESS:
            return _fail(decision)
        return AuthStep(AUTH_SUCCESS, data=reply, decision=decision)


def start_scram_exchange(
    method: str,
    credentials: Credentials,
    lookup: AccountLookup,
    guard: LoginGuard | None = None,
) -> ScramExchange | None:
    """The AuthExchange for `method`, or None when it is not SCRAM-SHA-256."""
    if method != MECHANISM:
        return None
    return ScramExchange(lookup, credentials, guard)

"""The account model shared by the account stores, and the password-login decision."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from xmq.auth.hash_pool import HashPool, HashPoolBusyError
from xmq.auth.verifiers import HashPolicy, ScramCredentials, hash_password, verify_password
from xmq.core.auth_ports import (
    AUTH_BAD_USERNAME_OR_PASSWORD,
    AUTH_CONNECTION_RATE_EXCEEDED,
    AUTH_NOT_AUTHORIZED,
    AUTH_SUCCESS,
    AuthDecision,
)

DEFAULT_GROUP: Final = "default"
"""Every account is in this group."""
ANONYMOUS_GROUP: Final = "anonymous"
"""The group of clients that connect without a user name (when anonymous access is allowed)."""


class AccountStoreUnavailableError(Exception):
    """The account store could not be reached (maps to 0x88 Server unavailable)."""


@dataclass(frozen=True, slots=True)
class AccountRecord:
    username: str
    verifier: str | None
    scram: ScramCredentials | None
    enabled: bool
    groups: tuple[str, ...]
    """Always contains DEFAULT_GROUP."""


def with_default_group(groups: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    ordered = dict.fromkeys([DEFAULT_GROUP, *groups])
    return tuple(ordered)


def bad_credentials(reason: str = "bad user name or password") -> AuthDecision:
    return AuthDecision(AUTH_BAD_USERNAME_OR_PASSWORD, reason_string=reason)


def decision_for(record: AccountRecord) -> AuthDecision:
    """The decision for a user whose password (or SCRAM proof) was right."""
    if not record.enabled:
        return AuthDecision(
            AUTH_NOT_AUTHORIZED, username=record.username, reason_string="account disabled"
        )
    return AuthDecision(AUTH_SUCCESS, username=record.username, groups=record.groups)


def busy_decision(error: HashPoolBusyError) -> AuthDecision:
    """The answer to a login refused by the hashing pool (not a failed login)."""
    return AuthDecision(AUTH_CONNECTION_RATE_EXCEEDED, reason_string=str(error))


class TimingShield:
    """Slow hashes of password logins on the fair pool (``HashPool``): the verification of a
    password, and a check against a throwaway verifier of the policy's cost, so a login with
    an unknown user name takes as long as one with a wrong password (no user enumeration
    by timing). The throwaway verifier is made on first use. Both raise
    ``HashPoolBusyError`` when the login's address has too many hashes waiting."""

    __slots__ = ("_making", "_policy", "_verifier", "pool")

    def __init__(self, policy: HashPolicy, pool: HashPool) -> None:
        self._policy = policy
        self._verifier: str | None = None
        self._making: asyncio.Future[str] | None = None  # made once, however many wait
        self.pool = pool

    async def verify(self, peer: str, password: bytes, verifier: str) -> bool:
        return await self.pool.run(peer, verify_password, password, verifier)

    async def spend(self, password: bytes, peer: str) -> None:
        verifier = self._verifier
        if verifier is None:
            if self._making is None:
                self._making = asyncio.ensure_future(
                    asyncio.to_thread(hash_password, os.urandom(16), self._policy)
                )
            verifier = self._verifier = await asyncio.shield(self._making)
        await self.verify(peer, password, verifier)


class VerifiedPasswords:
    """Remembers successful verifications, so a reconnect storm costs no slow hashing.

    Keys are HMACs of the password under a per-process random key, tied to the exact
    verifier string (a password change or re-hash invalidates them). Bounded, LRU.
    """

    __slots__ = ("_key", "_entries", "_limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._key = os.urandom(32)
        self._entries: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._limit = limit

    def _tag(self, username: str, password: bytes) -> bytes:
        return hmac.digest(self._key, username.encode() + b"\x00" + password, hashlib.sha256)

    def check(self, username: str, verifier: str, password: bytes) -> bool:
        entry = self._entries.get(username)
        if entry is None or entry[0] != verifier:
            return False
        if not hmac.compare_digest(entry[1], self._tag(username, password)):
            return False
        self._entries.move_to_end(username)
        return True

    def remember(self, username: str, verifier: str, password: bytes) -> None:
        self._entries[username] = (verifier, self._tag(username, password))
        self._entries.move_to_end(username)
        while len(self._entries) > self._limit:
            self._entries.popitem(last=False)

    def forget(self, username: str) -> None:
        self._entries.pop(username, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

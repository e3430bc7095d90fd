"""Accounts and ACLs in PostgreSQL: the `Authenticator` + `Authorizer` of a cluster.

- One round trip loads an account, its groups and its rules; the result is cached
  (LRU, TTL) and so are successful password verifications (no slow hash on reconnect).
- A dedicated connection LISTENs on `xmq_accounts`: a change invalidates the caches and
  is reported to the core (`AuthEvents.revoke` for a deleted or disabled account,
  `acl_changed` for rules and memberships). After the listener reconnects, everything
  cached is re-validated and the core is told to re-evaluate every client's ACL.
- Database unreachable: a stale cached account keeps serving; otherwise 0x88.
- A login whose verifier is weaker than the policy re-hashes it (and the SCRAM
  credentials) with the password it just verified.
- Failed logins are rate-limited per user name and per source address (`LoginGuard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import asyncpg

from xmq.auth.accounts import (
    ANONYMOUS_GROUP,
    AccountRecord,
    AccountStoreUnavailableError,
    TimingShield,
    VerifiedPasswords,
    bad_credentials,
    busy_decision,
    decision_for,
)
from xmq.auth.acl import AclRule, DenyAll, RuleAcl
from xmq.auth.hash_pool import HashPool, HashPoolBusyError
from xmq.auth.login_guard import GuardPolicy, LoginGuard
from xmq.auth.postgres_notify import AccountsListener, ChangeHandler
from xmq.auth.postgres_schema import migrate
from xmq.auth.postgres_store import StoredAccount, fetch_account, fetch_anonymous_rules
from xmq.auth.scram_exchange import start_scram_exchange
from xmq.auth.verifiers import (
    HashPolicy,
    derive_scram_credentials,
    hash_password,
    needs_rehash,
    scram_needs_rehash,
)
from xmq.core.auth_ports import (
    AUTH_CONNECTION_RATE_EXCEEDED,
    AUTH_NOT_AUTHORIZED,
    AUTH_SERVER_UNAVAILABLE,
    AUTH_SUCCESS,
    AuthDecision,
    AuthEvents,
    AuthExchange,
    ClientAcl,
    Credentials,
    NullAuthEvents,
)

logger = logging.getLogger(__name__)

DATABASE_ERRORS: Final = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)
_DEAD_CONNECTION: Final = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError)
_ANONYMOUS_KEY: Final = "\x00anonymous"


@dataclass(frozen=True, slots=True)
class PostgresAccountsConfig:
    dsn: str
    pool_max: int = 4
    connect_timeout: float = 3.0
    command_timeout: float = 5.0
    cache_ttl: float = 300.0
    cache_size: int = 100_000
    allow_anonymous: bool = False
    acl_no_match_allows: bool = False
    hash_policy: HashPolicy = field(default_factory=HashPolicy)
    guard_policy: GuardPolicy = field(default_factory=GuardPolicy)
    listen: bool = True
    migrate: bool = False
    """Apply the schema migrations at start (when the database is reachable then)."""


@dataclass(slots=True)
class _CacheEntry:
    account: StoredAccount | None
    rules: tuple[AclRule, ...]
    fetched_at: float
    generation: int


class PostgresAccounts:
    """Authenticator + Authorizer over the `xmq` schema. `await start()` before use."""

    def __init__(
        self,
        config: PostgresAccountsConfig,
        events: AuthEvents | None = None,
        *,
        guard: LoginGuard | None = None,
    ) -> None:
        self.config = config
        self.events: AuthEvents = events if events is not None else NullAuthEvents()
        self.guard = guard if guard is not None else LoginGuard(config.guard_policy)
        self._verified = VerifiedPasswords(config.cache_size)
        self._shield = TimingShield(config.hash_policy, HashPool(self.guard.address_rank))
        self._cache: OrderedDict[str, _CacheEntry] = OrderedDict()
        self._generation = 0
        self._changes = 0
        self._inflight: dict[str, asyncio.Future[_CacheEntry]] = {}
        self._pool: asyncpg.Pool | None = None
        self._listener: AccountsListener | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.available = False
        """Whether the last database access succeeded (for /readyz)."""

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Create the pool (no connection yet) and start listening. Never fails because
        the database is down: it is retried on demand and by the listener."""
        self._pool = await asyncpg.create_pool(
            self.config.dsn,
            min_size=0,
            max_size=self.config.pool_max,
            timeout=self.config.connect_timeout,
            command_timeout=self.config.command_timeout,
            server_settings={"application_name": "xmq-accounts"},
        )
        if self.config.migrate:
            try:
                applied = await self._fetch_with(migrate)
            except AccountStoreUnavailableError as exc:
                logger.warning("accounts schema not migrated, database unavailable: %s", exc)
            else:
                if applied:
                    logger.info("applied accounts schema migrations %s", applied)
        if self.config.listen:
            handler = ChangeHandler(self)
            self._listener = AccountsListener(
                self.config.dsn, handler, connect_timeout=self.config.connect_timeout
            )
            self._listener.start()

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def listening(self) -> bool:
        return self._listener is not None and self._listener.connected

    async def check_ready(self) -> bool:
        """One `SELECT 1` (for /readyz); updates `available`."""
        try:
            await self._fetch_with(lambda conn: conn.fetchval("SELECT 1"))
        except AccountStoreUnavailableError:
            return False
        return True

    # -- cache -------------------------------------------------------------------------

    def invalidate(self, username: str | None) -> None:
        """Forget one user's cached account (None: mark every entry stale)."""
        self._changes += 1
        if username is None:
            self._generation += 1  # entries stay as a fallback while the database is down
            return
        self._cache.pop(username, None)
        self._verified.forget(username)

    def cached_usernames(self) -> list[str]:
        return [key for key in self._cache if key != _ANONYMOUS_KEY]

    def _fresh(self, entry: _CacheEntry) -> bool:
        return (
            entry.generation == self._generation
            and time.monotonic() - entry.fetched_at < self.config.cache_ttl
        )

    def _store(self, key: str, entry: _CacheEntry) -> None:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)

    async def _fetch_with(self, query: Any) -> Any:
        """Run `query(conn)` on a pooled connection. A connection found dead (the server
        restarted since it was opened) is retried once on a fresh one."""
        pool = self._pool
        if pool is None:
            raise AccountStoreUnavailableError("accounts store not started")
        for attempt in (1, 2):
            try:
                async with pool.acquire(timeout=self.config.connect_timeout) as conn:
                    result = await query(conn)
            except _DEAD_CONNECTION as exc:
                if attempt == 1:
                    continue
                self._unavailable(exc)
            except DATABASE_ERRORS as exc:
                self._unavailable(exc)
            else:
                self.available = True
                return result
        raise AssertionError("unreachable")

    def _unavailable(self, exc: BaseException) -> NoReturn:
        if self.available:
            logger.warning("accounts database unavailable: %s", exc)
        self.available = False
        raise AccountStoreUnavailableError(str(exc)) from exc

    async def _load(self, key: str) -> _CacheEntry:
        changes, generation = self._changes, self._generation
        if key == _ANONYMOUS_KEY:
            rules = await self._fetch_with(fetch_anonymous_rules)
            entry = _CacheEntry(None, rules, time.monotonic(), generation)
        else:
            account = await self._fetch_with(lambda conn: fetch_account(conn, key))
            rules = account.rules if account is not None else ()
            entry = _CacheEntry(account, rules, time.monotonic(), generation)
        if changes == self._changes:  # no invalidation raced with this read
            self._store(key, entry)
        return entry

    async def _entry(self, key: str) -> _CacheEntry:
        """The cached entry when fresh; else the database's; else a stale one; else raise."""
        cached = self._cache.get(key)
        if cached is not None and self._fresh(cached):
            self._cache.move_to_end(key)
            return cached
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key))
            self._inflight[key] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(key, None))
        try:
            return await asyncio.shield(pending)
        except AccountStoreUnavailableError:
            stale = self._cache.get(key)
            if stale is not None:
                return stale
            raise

    async def lookup(self, username: str) -> AccountRecord | None:
        """The account (for SCRAM); raises AccountStoreUnavailableError."""
        entry = await self._entry(username)
        return entry.account.record if entry.account is not None else None

    async def refresh(self, usernames: list[str]) -> None:
        """Re-read these (stale) users; revoke the ones deleted or disabled meanwhile."""
        for username in usernames:
            old = self._cache.get(username)
            try:
                entry = await self._entry(username)
            except AccountStoreUnavailableError:
                return
            was_enabled = old is not None and old.account is not None and old.account.record.enabled
            now_enabled = entry.account is not None and entry.account.record.enabled
            if was_enabled and not now_enabled:
                self.events.revoke(username, AUTH_NOT_AUTHORIZED)

    # -- Authenticator -----------------------------------------------------------------

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        username, password, peer = credentials.username, credentials.password, credentials.peer
        if username is None:
            if self.config.allow_anonymous and password is None:
                return AuthDecision(AUTH_SUCCESS, groups=(ANONYMOUS_GROUP,))
            return bad_credentials("a user name is required")
        if not self.guard.allowed(username, peer):
            return AuthDecision(
                AUTH_CONNECTION_RATE_EXCEEDED, reason_string="too many failed logins"
            )
        try:
            entry = await self._entry(username)
        except AccountStoreUnavailableError:
            return AuthDecision(AUTH_SERVER_UNAVAILABLE, reason_string="account store unavailable")
        record = entry.account.record if entry.account is not None else None
        try:
            if record is None or record.verifier is None or password is None:
                if password is not None:
                    await self._shield.spend(password, peer)
                self.guard.record_failure(username, peer)
                return bad_credentials()
            verifier = record.verifier
            if not self._verified.check(username, verifier, password):
                if not await self._shield.verify(peer, password, verifier):
                    self.guard.record_failure(username, peer)
                    return bad_credentials()
                self._verified.remember(username, verifier, password)
                self._maybe_rehash(record, password)
        except HashPoolBusyError as error:
            return busy_decision(error)
        self.guard.record_success(username, peer)
        return decision_for(record)

    def start_exchange(self, method: str, credentials: Credentials) -> AuthExchange | None:
        return start_scram_exchange(method, credentials, self.lookup, self.guard)

    # -- Authorizer --------------------------------------------------------------------

    async def acl_for(self, decision: AuthDecision, client_id: str) -> ClientAcl:
        key = decision.username if decision.username is not None else _ANONYMOUS_KEY
        try:
            entry = await self._entry(key)
        except AccountStoreUnavailableError:
            logger.warning("no ACL for %r (database unavailable): denying all", decision.username)
            return DenyAll()
        # Groups come from the account itself: the core may pass a bare decision on reload.
        groups: tuple[str, ...] = (ANONYMOUS_GROUP,)
        if entry.account is not None:
            groups = entry.account.record.groups
        elif decision.username is not None:
            groups = decision.groups
        return RuleAcl(
            entry.rules,
            username=decision.username,
            groups=groups,
            client_id=client_id,
            no_match_allows=self.config.acl_no_match_allows,
        )

    # -- re-hash -----------------------------------------------------------------------

    def _maybe_rehash(self, record: AccountRecord, password: bytes) -> None:
        policy = self.config.hash_policy
        verifier = record.verifier or ""
        if not (needs_rehash(verifier, policy) or scram_needs_rehash(record.scram, policy)):
            return
        task = asyncio.get_running_loop().create_task(
            self._rehash(record.username, verifier, password), name=f"xmq-rehash-{record.username}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _rehash(self, username: str, old_verifier: str, password: bytes) -> None:
        policy = self.config.hash_policy

        def compute() -> tuple[str, str]:
            scram = derive_scram_credentials(password, iterations=policy.scram_iterations)
            return hash_password(password, policy), scram.encode()

        new_verifier, new_scram = await asyncio.to_thread(compute)
        try:
            updated = await self._fetch_with(
                lambda conn: conn.execute(
                    "UPDATE xmq.accounts SET verifier = $2, scram = $3, updated_at = now() "
                    "WHERE username = $1 AND verifier = $4",
                    username,
                    new_verifier,
                    new_scram,
                    old_verifier,
                )
            )
        except AccountStoreUnavailableError:
            return  # next login tries again
        if updated == "UPDATE 1":
            self._verified.remember(username, new_verifier, password)
            logger.info("re-hashed the password verifier of %r", username)

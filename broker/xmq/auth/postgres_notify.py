"""LISTEN/NOTIFY: account changes made anywhere reach every node's caches and clients.

`AccountsListener` keeps one dedicated connection LISTENing on `xmq_accounts`, pings it,
and reconnects after a loss; `ChangeHandler` turns each notification into cache
invalidations and `AuthEvents` calls. After every (re)connect the handler re-validates
what is cached (changes may have been missed) and asks the core to re-evaluate all ACLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Final, Protocol

import asyncpg

from xmq.auth.postgres_schema import NOTIFY_CHANNEL
from xmq.core.auth_ports import AUTH_NOT_AUTHORIZED, AuthEvents

logger = logging.getLogger(__name__)

LISTENER_APPLICATION_NAME: Final = "xmq-accounts-listener"
_ERRORS: Final = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class CacheOwner(Protocol):
    events: AuthEvents

    def invalidate(self, username: str | None) -> None: ...

    def cached_usernames(self) -> list[str]: ...

    async def refresh(self, usernames: list[str]) -> None: ...


def parse_notification(payload: str) -> dict[str, Any] | None:
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class ChangeHandler:
    __slots__ = ("_owner", "notifications")

    def __init__(self, owner: CacheOwner) -> None:
        self._owner = owner
        self.notifications = 0

    def handle(self, payload: str) -> None:
        self.notifications += 1
        owner, events = self._owner, self._owner.events
        data = parse_notification(payload)
        if data is None:
            owner.invalidate(None)
            events.acl_changed(None)
            return
        table, op = data.get("table"), data.get("op")
        username = data.get("username")
        username = username if isinstance(username, str) else None
        if table == "accounts" and username is not None:
            owner.invalidate(username)
            disabled = op == "UPDATE" and data.get("enabled") is False
            if op == "DELETE" or (disabled and data.get("old_enabled") is not False):
                events.revoke(username, AUTH_NOT_AUTHORIZED)
        elif table in ("memberships", "acl_rules") and username is not None:
            owner.invalidate(username)
            events.acl_changed(username)
        elif table == "groups" and op == "INSERT":
            return  # a new group has no members and no rules yet
        else:
            owner.invalidate(None)
            events.acl_changed(None)

    async def resynchronise(self) -> None:
        owner = self._owner
        usernames = owner.cached_usernames()
        owner.invalidate(None)
        await owner.refresh(usernames)
        owner.events.acl_changed(None)


class AccountsListener:
    """A dedicated LISTEN connection, reconnected after any loss."""

    def __init__(
        self,
        dsn: str,
        handler: ChangeHandler,
        *,
        connect_timeout: float = 3.0,
        retry_delay: float = 1.0,
        ping_interval: float = 2.0,
    ) -> None:
        self._dsn = dsn
        self._handler = handler
        self._connect_timeout = connect_timeout
        self._retry_delay = retry_delay
        self._ping_interval = ping_interval
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        self.connects = 0
        self._connected_event = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="xmq-accounts-listen")

    async def wait_connected(self) -> None:
        await self._connected_event.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        try:
            self._handler.handle(str(payload))
        except Exception:
            logger.exception("failed to handle accounts notification")

    async def _run(self) -> None:
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(
                    self._dsn,
                    timeout=self._connect_timeout,
                    server_settings={"application_name": LISTENER_APPLICATION_NAME},
                )
                await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
                self.connected = True
                self.connects += 1
                logger.info("listening for account changes")
                await self._handler.resynchronise()
                self._connected_event.set()
                while True:
                    await asyncio.sleep(self._ping_interval)
                    await conn.fetchval("SELECT 1", timeout=self._connect_timeout)
            except _ERRORS as exc:
                if self.connected:
                    logger.warning("accounts listener lost its connection: %s", exc)
            finally:
                self.connected = False
                self._connected_event.clear()
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(self._retry_delay)

"""PostgreSQL for the accounts tests: one real server per session, a fresh database per test."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support.postgres import PostgresServer

_database_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer.create()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


async def _create_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN of an empty database of its own."""
    name = f"xmq_test_{next(_database_numbers)}"
    asyncio.run(_create_database(postgres_server.dsn("postgres"), name))
    return postgres_server.dsn(name)

"""Fixtures shared by every test folder."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Generator, Iterator

import asyncpg
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import ClusterNodes
from tests.support.postgres import PostgresServer

_ids = itertools.count()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report shows the end of its brokers' logs: a fault that shows once in
    a CI run (a cluster test under load) can be read from that run's output."""
    report = yield
    if report.when == "call" and report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, ClusterNodes):
                for name, tail in value.log_tails().items():
                    report.sections.append((f"log of {name}", tail or "(empty)"))
            elif isinstance(value, BrokerProcess):
                report.sections.append((f"log of {value.name}", value.log_tail(80) or "(empty)"))
    return report


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """One real broker process shared by the tests of a module (use unique topics)."""
    process = BrokerProcess()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def start_broker() -> Iterator[Callable[..., BrokerProcess]]:
    """Factory for brokers with their own configuration, stopped after the test."""
    started: list[BrokerProcess] = []

    def start(config_yaml: str | None = None, **env: str) -> BrokerProcess:
        process = BrokerProcess(config_yaml, env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def uid() -> str:
    """A string unique to this test, for client ids and topics."""
    return f"t{os.getpid()}x{next(_ids)}"


# -- PostgreSQL: one real server per test session, a fresh database per test -------------------

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

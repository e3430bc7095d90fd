"""Fixtures shared by every test folder."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest

from tests.support.broker_process import BrokerProcess

_ids = itertools.count()


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

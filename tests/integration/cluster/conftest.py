"""Fixtures of the cluster tests: a real Redis and real broker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.redis_server import RedisServer, running_redis


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture(scope="module")
def three_nodes(redis_server: RedisServer) -> Iterator[ClusterNodes]:
    """Three linked nodes shared by a module's tests (use unique topics and client ids)."""
    nodes = ClusterNodes(redis_server, "three")
    try:
        nodes.start_many(3)
        yield nodes
    finally:
        nodes.stop_all()


@pytest.fixture
def fresh_cluster(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    """An empty cluster of this test's own (start nodes with ``start`` / ``start_many``)."""
    nodes = ClusterNodes(redis_server, f"c-{uid}")
    try:
        yield nodes
    finally:
        nodes.stop_all()

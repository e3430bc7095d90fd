"""Sessions belong to their user across the cluster: the identity is stored with the session
in Redis, so another user's CONNECT on another node (or after its owner died) is refused, and
a session resumed on another node obeys the user's current rules."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.integration.broker.test_session_isolation import intrude
from tests.support.accounts_file import (
    KEEP_300,
    OWN_DEVICES,
    leave_session,
    user_client,
    write_accounts,
)
from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import ClusterNodes, clear_dead_lease, wait_for
from tests.support.paho_client import PahoClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import MQTT_5
from xmq.contract import ClusterKeys

pytestmark = pytest.mark.integration

PASSWORDS = {"a": "pass-a", "b": "pass-b"}


@pytest.fixture
def accounts(tmp_path: Path) -> Path:
    return write_accounts(tmp_path / "accounts.yaml", PASSWORDS, OWN_DEVICES)


@pytest.fixture
def nodes(redis_server: RedisServer, uid: str, accounts: Path) -> Iterator[ClusterNodes]:
    cluster = ClusterNodes(
        redis_server, f"iso-{uid}", extra_yaml=f"auth:\n  accounts_file: {accounts}\n"
    )
    try:
        cluster.start_many(2)
        yield cluster
    finally:
        cluster.stop_all()


def _user(port: int, client_id: str, user: str) -> PahoClient:
    return user_client(port, client_id, user, PASSWORDS[user])


def _reloaded(process: BrokerProcess) -> bool:
    return "accounts file" in process.log()


def _resume_with_queue(port: int, client_id: str) -> None:
    """b resumes its session on ``port`` and gets the two messages ``_queue_for_b`` left."""
    again = _user(port, client_id, "b")
    try:
        result = again.connect(clean_start=False, properties=KEEP_300)
        assert (result.reason, result.session_present) == (0, True)
        assert sorted(m.payload for m in again.expect(2)) == [b"queued 0", b"queued 1"]
    finally:
        again.close()


def _queue_for_b(port: int, count: int) -> None:
    publisher = _user(port, "pub-b", "b")
    try:
        assert publisher.connect().reason == 0
        for n in range(count):
            assert publisher.publish(f"devices/b/{n}", f"queued {n}", qos=1) == 0
    finally:
        publisher.disconnect()


def test_another_user_on_another_node_is_refused_the_owner_undisturbed(
    nodes: ClusterNodes, uid: str
) -> None:
    client_id = f"dev-b-{uid}"
    owner = _user(nodes.port(1), client_id, "b")
    try:
        assert owner.connect(clean_start=True, properties=KEEP_300).reason == 0
        assert owner.subscribe("devices/b/#", qos=1) == [1]
        for node in (2, 1):
            for version, code in ((MQTT_5, 0x87), (4, 5)):
                ack, after = intrude(nodes.port(node), client_id, "a", version)
                assert (ack.reason_code, ack.session_present, after) == (code, False, [])
        _queue_for_b(nodes.port(2), 1)
        assert [m.payload for m in owner.expect(1)] == [b"queued 0"]
        assert owner.disconnects.empty()  # never taken over
        owner.disconnect()
        _queue_for_b(nodes.port(2), 2)  # offline now: queued in its session on node 1
        ack, after = intrude(nodes.port(2), client_id, "a", MQTT_5)
        assert (ack.reason_code, after) == (0x87, [])
        _resume_with_queue(nodes.port(2), client_id)  # the owner moves to node 2: allowed
    finally:
        owner.close()


def test_a_dead_owners_stored_session_is_refused_to_another_user(
    nodes: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    client_id = f"dev-b-{uid}"
    leave_session(nodes.port(1), client_id, "b", PASSWORDS["b"], "devices/b/#")
    _queue_for_b(nodes.port(2), 2)
    nodes.kill(1)  # kill -9: the session lives on in Redis only
    clear_dead_lease(redis_server, nodes.cluster, "node-1")
    ack, after = intrude(nodes.port(2), client_id, "a", MQTT_5)
    assert (ack.reason_code, ack.session_present, after) == (0x87, False, [])
    _resume_with_queue(nodes.port(2), client_id)


def test_rules_revoked_while_offline_apply_after_a_takeover_on_another_node(
    nodes: ClusterNodes, redis_server: RedisServer, accounts: Path, uid: str
) -> None:
    client_id = f"dev-b-{uid}"
    leave_session(nodes.port(1), client_id, "b", PASSWORDS["b"], "devices/b/#")
    _queue_for_b(nodes.port(2), 2)
    narrowed = [{"permission": "allow", "action": "both", "topic": "devices/%u/public/#"}]
    write_accounts(accounts, PASSWORDS, narrowed)
    for index in (1, 2):
        process = nodes.nodes[index]
        os.kill(process.proc.pid, signal.SIGHUP)
        wait_for(partial(_reloaded, process), 10, "the accounts file reloaded")
    again = _user(nodes.port(2), client_id, "b")
    try:
        result = again.connect(clean_start=False, properties=KEEP_300)
        assert (result.reason, result.session_present) == (0, True)
        again.expect_none(1.0)  # the queued messages are dropped
        keys = ClusterKeys(nodes.cluster)
        client = redis_server.client()
        try:  # the stored copy follows: no subscription, no records left
            wait_for(
                lambda: (
                    not client.hlen(keys.session_subscriptions(client_id))
                    and not client.llen(keys.session_queue(client_id))
                ),
                10,
                "the revoked subscription and records removed from Redis",
            )
        finally:
            client.close()
    finally:
        again.close()

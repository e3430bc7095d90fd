"""One Redis key namespace, one XmqCluster: the ``cluster:uid`` record (real Redis, real nodes)."""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import node_yaml
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys, NodeLease
from xmq.contract.pod import CLUSTER_UID_ENV
from xmq_operator.redis_state import RedisPool

pytestmark = pytest.mark.integration


def _node(redis_server: RedisServer, cluster: str, uid: str, index: int) -> BrokerProcess:
    return BrokerProcess(
        node_yaml(redis_server.url, cluster, 2.0, 0),
        env={"XMQ_NODE_ID": f"node-{index}", CLUSTER_UID_ENV: uid},
    )


def test_a_node_of_another_xmqcluster_refuses_to_join(redis_server: RedisServer) -> None:
    keys = ClusterKeys("identity-a")
    first = _node(redis_server, keys.cluster, "uid-a", 1)
    client = redis_server.client()
    try:
        assert client.get(keys.cluster_uid()) == b"uid-a"
        with pytest.raises(RuntimeError, match="did not start") as caught:
            _node(redis_server, keys.cluster, "uid-b", 2)
        refusals = [line for line in str(caught.value).splitlines() if "refusing to start" in line]
        assert len(refusals) == 1, caught.value
        assert "uid-a" in refusals[0] and "uid-b" in refusals[0]
        assert "Traceback" not in str(caught.value)
        assert client.get(keys.cluster_uid()) == b"uid-a"
        assert not client.exists(keys.lease("node-2-0"))
        # A node of the same XmqCluster joins.
        _node(redis_server, keys.cluster, "uid-a", 3).stop()
    finally:
        first.stop()
        client.close()


def test_the_operator_claims_refuses_and_takes_over_only_a_gone_clusters_namespace(
    redis_server: RedisServer,
) -> None:
    pool = RedisPool()
    client = redis_server.client()
    try:
        mine = pool.cluster(redis_server.url, "identity-op")
        assert mine.ensure_owner("uid-1", lambda: {"uid-1"}) is None
        assert client.get(mine.keys.cluster_uid()) == b"uid-1"
        # Another XmqCluster the operator can see: refused.
        assert mine.ensure_owner("uid-2", lambda: {"uid-1", "uid-2"}) == "uid-1"
        # Unknown owner but a live lease (another Kubernetes cluster sharing the Redis): refused.
        lease = NodeLease(
            node_id="xmq-0-0",
            pod_name="xmq-0",
            pod_uid="pod-1",
            address="127.0.0.1:1",
            epoch=1,
            started_at=1.0,
        )
        client.set(mine.keys.lease("xmq-0-0"), lease.to_json(), px=60_000)
        client.sadd(mine.keys.members(), "xmq-0-0")
        assert mine.ensure_owner("uid-2", lambda: {"uid-2"}) == "uid-1"
        # Listing failed: never taken over.
        client.delete(mine.keys.lease("xmq-0-0"))
        assert mine.ensure_owner("uid-2", lambda: None) == "uid-1"
        # The owner is gone (deleted XmqCluster) and nothing is alive: taken over.
        assert mine.ensure_owner("uid-2", lambda: {"uid-2"}) is None
        assert client.get(mine.keys.cluster_uid()) == b"uid-2"
    finally:
        pool.close()
        client.close()

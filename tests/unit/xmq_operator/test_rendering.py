from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.pod_security import restricted_violations
from tests.unit.xmq_operator.cluster_bodies import cluster_body
from xmq.contract import pod as pod_contract
from xmq_operator.broker_config import InvalidBrokerConfigError
from xmq_operator.desired_state import Desired, parse_spec, render
from xmq_operator.naming import (
    CONFIG_HASH_ANNOTATION,
    LABEL_MANAGED_BY,
    RESTART_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
)


def _render(
    spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None
) -> Desired:
    body = cluster_body(spec, annotations)
    return render(body, parse_spec(body))


def _pod_spec(desired: Desired) -> dict[str, Any]:
    spec: dict[str, Any] = desired.statefulset["spec"]["template"]["spec"]
    return spec


def _by_kind(desired: Desired, kind: str, name: str | None = None) -> dict[str, Any]:
    for child in desired.children:
        if child["kind"] == kind and (name is None or child["metadata"]["name"] == name):
            return child
    raise AssertionError(f"no {kind} {name}")


def test_every_child_is_owned_by_the_cluster_and_labelled() -> None:
    desired = _render()
    for child in (*desired.children, desired.statefulset):
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "xmq.io/v1alpha1",
            "kind": "XmqCluster",
            "name": "prod",
            "uid": "0f6a3c2e-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert child["metadata"]["namespace"] == "mq"
        labels = child["metadata"]["labels"]
        assert labels[LABEL_MANAGED_BY] == "xmq-operator"
        assert labels["app.kubernetes.io/instance"] == "prod"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
    kinds = sorted(child["kind"] for child in desired.children)
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Service", "Service"]


def test_the_statefulset_is_on_delete_with_the_default_replicas() -> None:
    sts = _render().statefulset
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["replicas"] == 4
    assert sts["spec"]["serviceName"] == "prod-peers"
    assert sts["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "xmq",
        "app.kubernetes.io/instance": "prod",
        "app.kubernetes.io/component": "broker",
    }


def test_pods_have_probes_on_the_health_port_and_a_prestop_drain() -> None:
    (container,) = _pod_spec(_render())["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["xmq", "drain"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"mqtt": 1884, "cluster": 7884, "health": pod_contract.HEALTH_PORT}
    assert _pod_spec(_render())["terminationGracePeriodSeconds"] == 60 + 15


def test_pods_get_their_identity_and_redis_url_from_the_api() -> None:
    (container,) = _pod_spec(
        _render({"postgres": {"secretRef": {"name": "pg", "key": "dsn"}}, "workers": 2})
    )["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["XMQ_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["XMQ_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["XMQ_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "redis", "key": "url"}
    assert env["XMQ_POSTGRES_DSN"]["valueFrom"]["secretKeyRef"] == {"name": "pg", "key": "dsn"}
    assert env["XMQ_NODE_ID"]["value"] == "$(XMQ_POD_NAME)-0"
    assert list(env).index("XMQ_POD_NAME") < list(env).index("XMQ_NODE_ID")
    assert env["XMQ_WORKERS"]["value"] == "2"


def test_default_placement_is_the_c5n_group_one_per_node_spread_over_zones() -> None:
    pod_spec = _pod_spec(_render())
    (term,) = pod_spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (expression,) = term["matchExpressions"]
    assert expression["key"] == "node.kubernetes.io/instance-type"
    assert "c5n.2xlarge" in expression["values"]
    assert all(value.startswith("c5n.") for value in expression["values"])
    (anti,) = pod_spec["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    (spread,) = pod_spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"


def test_a_pinned_zone_is_a_required_node_affinity_without_spread() -> None:
    pod_spec = _pod_spec(
        _render(
            {
                "placement": {
                    "zones": {"mode": "Pinned", "zone": "us-east-1a"},
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                }
            }
        )
    )
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]} in (
        expressions
    )
    assert "topologySpreadConstraints" not in pod_spec
    assert pod_spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]


def test_tls_adds_a_port_a_volume_and_a_service_port() -> None:
    desired = _render({"listeners": {"tls": {"enabled": True, "secretName": "mqtt-tls"}}})
    pod_spec = _pod_spec(desired)
    assert {"name": "tls", "secret": {"secretName": "mqtt-tls"}} in pod_spec["volumes"]
    client = _by_kind(desired, "Service", "prod")
    assert [port["port"] for port in client["spec"]["ports"]] == [1884, 8883]
    headless = _by_kind(desired, "Service", "prod-peers")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True


def test_the_pdb_follows_the_spec() -> None:
    pdb = _by_kind(_render({"podDisruptionBudget": {"maxUnavailable": 1}}), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    kinds = [c["kind"] for c in _render({"podDisruptionBudget": {"enabled": False}}).children]
    assert "PodDisruptionBudget" not in kinds


def test_the_configmap_carries_the_validated_config_file() -> None:
    desired = _render({"config": {"mqtt": {"max_packet_size": 65536}}})
    config_map = _by_kind(desired, "ConfigMap")
    text = config_map["data"]["xmq.yaml"]
    assert "max_packet_size: 65536" in text
    assert "port: 1884" in text
    assert "name: mq.prod" in text
    assert "link_host: 0.0.0.0" in text
    assert "link_port: 7884" in text
    tls = _render({"listeners": {"tls": {"enabled": True, "secretName": "s"}}})
    tls_text = _by_kind(tls, "ConfigMap")["data"]["xmq.yaml"]
    assert "cert_file: /etc/xmq/tls/tls.crt" in tls_text


def test_rendering_is_deterministic() -> None:
    assert _render() == _render()


@pytest.mark.parametrize(
    "spec",
    [
        {"replicas": 7},
        {"podDisruptionBudget": {"maxUnavailable": 2}},
        {"config": {"log": {"level": "DEBUG"}}},
    ],
    ids=["replicas", "pdb", "hot-reloadable-log-level"],
)
def test_changes_that_need_no_restart_keep_the_template_hash(spec: dict[str, Any]) -> None:
    assert _render(spec).template_hash == _render().template_hash


@pytest.mark.parametrize(
    "spec",
    [
        {"config": {"mqtt": {"receive_maximum": 10}}},
        {"image": "xmq:0.2.0"},
        {"workers": 3},
        {"resources": {"limits": {"cpu": "4"}}},
    ],
    ids=["broker-config", "image", "workers", "resources"],
)
def test_restart_relevant_changes_move_the_template_hash(spec: dict[str, Any]) -> None:
    assert _render(spec).template_hash != _render().template_hash


def test_the_restart_annotation_rolls_and_the_config_hash_tracks_config_only() -> None:
    restarted = _render(annotations={RESTART_ANNOTATION: "2026-11-30T03:00:00Z"})
    plain = _render()
    assert restarted.template_hash != plain.template_hash
    assert restarted.config_hash == plain.config_hash
    annotations = restarted.statefulset["spec"]["template"]["metadata"]["annotations"]
    assert annotations[CONFIG_HASH_ANNOTATION] == plain.config_hash
    assert annotations[TEMPLATE_HASH_ANNOTATION] == restarted.template_hash


@pytest.mark.parametrize(
    "config",
    [{"mqtt": {"max_packet_size": 1}}, {"no_such_section": True}, {"log": {"level": "LOUD"}}],
    ids=["out-of-bounds", "unknown-key", "bad-enum"],
)
def test_an_invalid_broker_config_is_refused_naming_the_field(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidBrokerConfigError, match="spec.config is invalid") as caught:
        _render({"config": config})
    first_key = next(iter(config))
    assert first_key in str(caught.value)


def test_a_configured_cluster_name_must_be_a_valid_redis_name() -> None:
    with pytest.raises(InvalidBrokerConfigError, match="invalid cluster name"):
        _render({"config": {"cluster": {"name": "bad:name"}}})


@pytest.mark.parametrize(
    ("spec", "workers"),
    [
        ({}, 0),
        ({"workers": 3}, 3),
        ({"resources": {"limits": {"cpu": "3500m"}, "requests": {"cpu": 1}}}, 4),
        ({"resources": {"requests": {"cpu": "2"}}}, 2),
        ({"workers": 1, "resources": {"limits": {"cpu": 8}}}, 1),
    ],
    ids=["unknown", "explicit", "cpu-limit", "cpu-request", "explicit-wins"],
)
def test_workers_per_pod_and_their_ports(spec: dict[str, Any], workers: int) -> None:
    (container,) = _pod_spec(_render(spec))["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["XMQ_WORKERS"] == str(workers)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    expected = {"mqtt": 1884, "cluster": 7884, "health": pod_contract.HEALTH_PORT}
    for worker in range(1, workers):
        expected[f"cluster-{worker}"] = 7884 + worker
    for worker in range(workers if workers > 1 else 0):  # "health" is the supervisor's
        expected[f"health-{worker}"] = pod_contract.HEALTH_PORT + 1 + worker
    assert ports == expected
    assert all(len(name) <= 15 for name in ports)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):  # every worker's state
        assert container[probe]["httpGet"]["port"] == "health"


def test_workers_in_the_broker_config_are_refused_for_spec_workers() -> None:
    with pytest.raises(InvalidBrokerConfigError, match="workers: set spec.workers"):
        _render({"config": {"workers": 2}})


def test_link_tls_mounts_the_secret_and_configures_the_links() -> None:
    desired = _render({"linkTls": {"secretName": "xmq-link-tls"}})
    pod_spec = _pod_spec(desired)
    assert {"name": "link-tls", "secret": {"secretName": "xmq-link-tls"}} in pod_spec["volumes"]
    (container,) = pod_spec["containers"]
    assert {
        "name": "link-tls",
        "mountPath": pod_contract.LINK_TLS_DIR,
        "readOnly": True,
    } in container["volumeMounts"]
    config_map = _by_kind(desired, "ConfigMap")
    (text,) = config_map["data"].values()
    link_tls = yaml.safe_load(text)["cluster"]["link_tls"]
    assert link_tls == {
        "cert_file": "/etc/xmq/link-tls/tls.crt",
        "key_file": "/etc/xmq/link-tls/tls.key",
        "ca_file": "/etc/xmq/link-tls/ca.crt",
    }
    assert desired.template_hash != _render().template_hash


def test_admin_token_mounts_the_secret_key_and_configures_the_token_file() -> None:
    desired = _render(
        {"adminToken": {"secretName": "xmq-admin", "key": "drain"}, "config": {"metrics": {}}}
    )
    pod_spec = _pod_spec(desired)
    volume = {
        "name": "admin-token",
        "secret": {"secretName": "xmq-admin", "items": [{"key": "drain", "path": "token"}]},
    }
    assert volume in pod_spec["volumes"]
    (container,) = pod_spec["containers"]
    assert {
        "name": "admin-token",
        "mountPath": pod_contract.ADMIN_TOKEN_DIR,
        "readOnly": True,
    } in container["volumeMounts"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["xmq", "drain"]
    config_map = _by_kind(desired, "ConfigMap")
    (text,) = config_map["data"].values()
    metrics = yaml.safe_load(text)["metrics"]
    assert metrics == {"admin_token_file": pod_contract.ADMIN_TOKEN_FILE}
    assert pod_contract.ADMIN_TOKEN_FILE == "/etc/xmq/admin/token"
    assert "admin_token_file" not in yaml.safe_load(
        next(iter(_by_kind(_render(), "ConfigMap")["data"].values()))
    ).get("metrics", {})


def test_each_config_revision_is_an_immutable_configmap_the_pods_mount() -> None:
    desired = _render({"config": {"mqtt": {"receive_maximum": 10}}})
    config_map = _by_kind(desired, "ConfigMap")
    name = config_map["metadata"]["name"]
    assert name == desired.config_revision
    assert name.startswith("prod-config-") and len(name) == len("prod-config-") + 10
    assert config_map["immutable"] is True
    assert config_map["metadata"]["labels"]["xmq.io/config-revision"] == name.rsplit("-", 1)[1]
    volumes = {v["name"]: v for v in _pod_spec(desired)["volumes"]}
    assert volumes["config"]["configMap"]["name"] == name
    # A reverted spec renders the same revision again: its ConfigMap is reused.
    assert _render({"config": {"mqtt": {"receive_maximum": 10}}}).config_revision == name
    assert _render().config_revision != name


def test_a_log_only_change_gets_its_own_revision_but_rolls_nothing() -> None:
    logged = _render({"config": {"log": {"level": "DEBUG"}}})
    plain = _render()
    assert logged.config_revision != plain.config_revision
    assert logged.template_hash == plain.template_hash


def test_pods_carry_the_xmqcluster_uid_for_the_redis_namespace_check() -> None:
    (container,) = _pod_spec(_render())["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env[pod_contract.CLUSTER_UID_ENV] == {
        "name": pod_contract.CLUSTER_UID_ENV,
        "value": "0f6a3c2e-uid",
    }


def test_the_pdb_lets_unready_pods_be_evicted() -> None:
    pdb = _by_kind(_render(), "PodDisruptionBudget")
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize("quantity", ["lots", "1.5.2", "-1", "10 Gi", "1GB", True])
def test_an_invalid_resource_quantity_is_an_invalid_spec(quantity: object) -> None:
    from pydantic import ValidationError

    from xmq_operator.desired_state import spec_error

    body = cluster_body({"resources": {"requests": {"cpu": quantity}}})
    with pytest.raises(ValidationError) as caught:
        parse_spec(body)
    assert spec_error(caught.value).startswith("spec is invalid: resources.requests")


@pytest.mark.parametrize("quantity", ["500m", "2", 2, "1.5Gi", "512Mi", "1e3", "0.5", "100k"])
def test_valid_resource_quantities_are_accepted(quantity: object) -> None:
    parse_spec(cluster_body({"resources": {"limits": {"cpu": quantity, "memory": quantity}}}))


@pytest.mark.parametrize(
    "spec",
    [{}, {"workers": 3, "listeners": {"tls": {"enabled": True, "secretName": "tls"}}}],
    ids=["default", "tls-workers"],
)
def test_broker_pods_meet_pod_security_restricted(spec: dict[str, Any]) -> None:
    assert restricted_violations(_pod_spec(_render(spec))) == []

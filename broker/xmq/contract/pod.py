"""What a broker pod run by the operator can rely on, and what the operator relies on.

The operator builds pods to these conventions; the broker reads them. Changing one is a
contract change for both sides.
"""

from __future__ import annotations

POD_NAME_ENV = "XMQ_POD_NAME"
"""Pod name (downward API); node ids are ``<pod name>-<worker>``."""
POD_UID_ENV = "XMQ_POD_UID"
"""Pod UID (downward API); written into every lease as ``pod_uid``."""
CLUSTER_UID_ENV = "XMQ_CLUSTER_UID"
"""UID of the XmqCluster the pod belongs to: the broker refuses to join a Redis key namespace
recorded (``cluster:uid``) for another one."""
POD_IP_ENV = "XMQ_POD_IP"
"""Pod IP (downward API); the host part of each node's cluster-link address."""
POD_NAMESPACE_ENV = "XMQ_POD_NAMESPACE"
"""Pod namespace (downward API)."""
CONFIG_FILE_ENV = "XMQ_CONFIG"
"""Path of the broker's YAML config file (mounted from the operator's ConfigMap)."""
REDIS_URL_ENV = "XMQ_REDIS_URL"
"""Redis URL, from the Secret the XmqCluster names; overrides the config file."""
POSTGRES_DSN_ENV = "XMQ_POSTGRES_DSN"
"""PostgreSQL DSN, from the Secret the XmqCluster names; overrides the config file."""

CONFIG_DIR = "/etc/xmq"
CONFIG_FILE_NAME = "xmq.yaml"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_FILE_NAME}"
TLS_DIR = "/etc/xmq/tls"
"""Where the listener TLS Secret (``tls.crt``, ``tls.key``, optional ``ca.crt``) is mounted."""
LINK_TLS_DIR = "/etc/xmq/link-tls"
"""Where the node-link TLS Secret (``tls.crt``, ``tls.key``, ``ca.crt``) is mounted."""
ADMIN_TOKEN_DIR = "/etc/xmq/admin"
ADMIN_TOKEN_FILE = f"{ADMIN_TOKEN_DIR}/token"
"""The admin bearer token (``spec.adminToken``'s Secret key), ``metrics.admin_token_file``;
the preStop ``xmq drain`` reads it through the config file."""

MQTT_PORT = 1884
MQTT_TLS_PORT = 8883
WEBSOCKET_PORT = 8080
CLUSTER_LINK_PORT = 7884
"""Base port of the node-to-node links; worker ``w`` listens on ``CLUSTER_LINK_PORT + w``."""
HEALTH_PORT = 9090
"""HTTP port of the pod's probes, ``/healthz`` and ``/readyz`` (and ``/metrics``): the node's
own with one process; with several workers the supervisor's, answering for every worker, and
worker ``w`` serves its own on ``HEALTH_PORT + 1 + w``."""
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
METRICS_PATH = "/metrics"

DRAIN_COMMAND = ("xmq", "drain")
"""preStop hook: hand every session over to other nodes, then stop accepting connections."""
BROKER_COMMAND = ("xmq", "serve", "--config", CONFIG_PATH)
"""The broker container's command."""
NODE_ID_ENV = "XMQ_NODE_ID"
"""Node id of worker 0 (``$(XMQ_POD_NAME)-0``); worker ``w`` of the pod is ``<pod>-<w>``."""
WORKERS_ENV = "XMQ_WORKERS"
"""Broker processes in the pod (0: one per CPU)."""

"""Accounts files for integration tests: users with cheap verifiers, ACL rules, rewrites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from paho.mqtt.packettypes import PacketTypes

from tests.support.paho_client import V5, PahoClient, props
from xmq.auth.verifiers import HashPolicy, hash_password

FAST = HashPolicy(pbkdf2_iterations=1000, scram_iterations=1000)
OWN_DEVICES = [{"permission": "allow", "action": "both", "topic": "devices/%u/#"}]
"""The rule of the isolation tests: every user reads and writes its own ``devices/<user>/``."""


def write_accounts(
    path: Path,
    passwords: dict[str, str],
    acl: list[dict[str, Any]] | None = None,
    policy: HashPolicy = FAST,
    allow_anonymous: bool = False,
) -> Path:
    """Write (or rewrite) an accounts file; returns ``path``."""
    users = {name: {"password": hash_password(pw, policy)} for name, pw in passwords.items()}
    data: dict[str, Any] = {"allow_anonymous": allow_anonymous, "users": users}
    if acl is not None:
        data["acl"] = acl
    path.write_text(yaml.safe_dump(data))
    return path


def user_client(
    port: int, client_id: str, username: str, password: str, version: Any = V5
) -> PahoClient:
    """A paho client that logs in as ``username``."""
    client = PahoClient(port, client_id, version=version)
    client.client.username_pw_set(username, password)
    return client


KEEP_300 = props(PacketTypes.CONNECT, SessionExpiryInterval=300)
"""CONNECT properties of a persistent session (300 s)."""


def leave_session(
    port: int, client_id: str, username: str, password: str, topic_filter: str
) -> None:
    """Log in, subscribe to ``topic_filter`` (QoS 1) and disconnect: a persistent session is
    left waiting offline."""
    client = user_client(port, client_id, username, password)
    try:
        assert client.connect(clean_start=True, properties=KEEP_300).reason == 0
        assert client.subscribe(topic_filter, qos=1) == [1]
        client.disconnect()
    finally:
        client.close()

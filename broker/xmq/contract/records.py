"""Records stored in Redis, as pydantic models with a fixed JSON form.

Readers ignore unknown fields, so a newer writer may add optional fields without bumping the
contract version; removing or retyping a field bumps it (see :mod:`xmq.contract.keys`).
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

NodeIdStr = Annotated[str, StringConstraints(min_length=3, max_length=260)]

DEFAULT_LEASE_TTL_SECONDS = 10.0
"""Default lease time to live; a node renews its lease every ``ttl / 5``."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    def to_json(self) -> str:
        """The record as the compact JSON string stored in Redis."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, raw: str | bytes) -> Self:
        """Parse a record read from Redis (unknown fields are ignored)."""
        return cls.model_validate_json(raw)


class NodeLease(_Record):
    """Value of ``node:lease:<node id>``: proof that a node is alive, renewed with a TTL.

    ``pod_uid`` and ``epoch`` fence the operator's dead-pod cleanup: it deletes a lease only
    when both still match the pod it saw die, so a live replacement is never touched.
    """

    node_id: NodeIdStr
    pod_name: str = Field(min_length=1)
    pod_uid: str = Field(min_length=1)
    address: str = Field(min_length=1, description="host:port of the node's cluster link")
    epoch: int = Field(ge=1, description="run epoch from INCR node:epoch:<node id>")
    started_at: float = Field(ge=0, description="Unix time the node process started")


class SessionOwner(_Record):
    """Value of ``session:owner:<client id>``: the node (and its run) that owns the session.

    Claims and takeovers compare-and-set this record; an owner whose lease is gone (or whose
    lease carries another epoch) is dead and its claim may be taken directly.
    """

    node_id: NodeIdStr
    epoch: int = Field(ge=1)
    identity: str | None = Field(
        default=None,
        description="who holds the session: 'user:<name>' or 'anonymous' (absent: written "
        "before identities were recorded; not checked)",
    )


class SessionState(_Record):
    """Fields of ``session:state:<client id>`` for a persistent session."""

    protocol_version: int = Field(ge=3, le=5)
    expiry_interval: int = Field(ge=0, le=0xFFFFFFFF, description="seconds; 0xFFFFFFFF never")
    disconnected_at: float | None = Field(default=None, ge=0)
    identity: str | None = Field(
        default=None, description="who holds the session (as in ``SessionOwner``)"
    )


class RetainedMessage(_Record):
    """Value of ``retained:msg:<topic>``: the retained message, or a tombstone clearing it."""

    topic: str = Field(min_length=1)
    revision: int = Field(ge=1)
    qos: int = Field(default=0, ge=0, le=2)
    payload_b64: str = Field(default="", description="base64 of the payload")
    properties: dict[str, str | int | list[str]] = Field(
        default_factory=dict,
        description='"mqtt5": base64 of the MQTT 5 PUBLISH properties (when there are any)',
    )
    tombstone: bool = False
    expires_at: float | None = Field(default=None, ge=0, description="Unix time it expires")

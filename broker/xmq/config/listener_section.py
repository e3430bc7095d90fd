"""The ``listeners`` section: one listening socket each, with its TLS certificates and rates."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from xmq.config.section import Section

DEFAULT_PORTS = {"tcp": 1884, "tls": 8884, "ws": 8083, "wss": 8443}


class TlsConfig(Section):
    """Server certificate and optional client certificates (mTLS) of a TLS/WSS listener."""

    cert_file: Path = Field(description="PEM certificate chain of the server.")
    key_file: Path = Field(description="PEM private key of the server.")
    ca_file: Path | None = Field(
        default=None, description="PEM CA bundle that client certificates must chain to."
    )
    client_certs: Literal["none", "optional", "required"] = Field(
        default="none",
        description="Ask clients for a certificate: not at all, optionally, or require one "
        "(needs ca_file).",
    )
    cn_as_username: bool = Field(
        default=False,
        description="Use the client certificate's Common Name as the user name.",
    )
    min_version: Literal["TLSv1.2", "TLSv1.3"] = Field(
        default="TLSv1.2", description="Oldest TLS version accepted."
    )
    reload_interval_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds between checks of the certificate files for changes (0: only on "
        "SIGHUP). Open connections keep their session.",
    )

    @model_validator(mode="after")
    def _client_ca(self) -> TlsConfig:
        if self.client_certs != "none" and self.ca_file is None:
            raise ValueError(f"client_certs={self.client_certs!r} needs ca_file")
        return self


class ListenerConfig(Section):
    """One listening socket."""

    name: str = Field(default="mqtt", description="Name used in logs and metrics.")
    protocol: Literal["tcp", "tls", "ws", "wss"] = Field(
        default="tcp", description="Transport: plain TCP, TLS, WebSocket or secure WebSocket."
    )
    host: str = Field(default="0.0.0.0", description="Address to bind.")
    port: int = Field(
        default=1884,
        ge=0,
        le=65535,
        description="Port to bind (0: any free). Default by protocol: tcp 1884, tls 8884, "
        "ws 8083, wss 8443.",
    )
    tls: TlsConfig | None = Field(
        default=None, description="Certificates (required for tls and wss)."
    )
    ws_path: str = Field(
        default="/mqtt", description="HTTP path of the WebSocket endpoint (ws and wss)."
    )
    proxy_protocol: Literal["off", "optional", "required"] = Field(
        default="off",
        description="PROXY protocol v1/v2 header before the client's bytes (as sent by a "
        "load balancer): off, accepted if present, or required (connections without it are "
        "closed).",
    )
    max_connections: int = Field(
        default=0, ge=0, description="Connections accepted at once on this listener (0: no limit)."
    )
    max_connection_rate: float = Field(
        default=0,
        ge=0,
        description="New connections per second on this listener; above it CONNECT is refused "
        "with 0x9F (0: no limit).",
    )
    connection_rate_burst: int = Field(
        default=0,
        ge=0,
        description="Connections allowed in a burst above the rate (0: one second's worth).",
    )
    publish_rate: float = Field(
        default=0,
        ge=0,
        description="PUBLISH packets per second per client; a faster client is slowed down "
        "(reading paused), nothing is dropped (0: no limit).",
    )
    publish_burst: int = Field(
        default=0, ge=0, description="PUBLISH burst above the rate (0: one second's worth)."
    )
    connect_timeout_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds a new connection may take for its PROXY header, its TLS "
        "handshake, its WebSocket upgrade and its CONNECT, each, before it is dropped (0: no "
        "limit; the PROXY header then gets 5).",
    )

    @model_validator(mode="before")
    @classmethod
    def _port_by_protocol(cls, data: Any) -> Any:
        if isinstance(data, dict) and "port" not in data:
            protocol = data.get("protocol", "tcp")
            if protocol in DEFAULT_PORTS:
                return {**data, "port": DEFAULT_PORTS[protocol]}
        return data

    @model_validator(mode="after")
    def _tls_needed(self) -> ListenerConfig:
        if self.protocol in ("tls", "wss") and self.tls is None:
            raise ValueError(f"protocol {self.protocol!r} needs a tls section")
        if self.protocol in ("tcp", "ws") and self.tls is not None:
            raise ValueError(f"protocol {self.protocol!r} takes no tls section (use tls/wss)")
        if not self.ws_path.startswith("/"):
            raise ValueError(f"ws_path must start with '/', got {self.ws_path!r}")
        return self

"""Configuration errors name the field and what it allows; listener rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from xmq.app.cli import main
from xmq.config import ListenerConfig, TlsConfig, load_config
from xmq.config.reference_doc import describe_errors


def _errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "xmq.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError) as caught:
        load_config(path)
    return describe_errors(caught.value)


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "listeners: [{name: a, protocol: quic}]\n",
            "listeners.0.protocol: Input should be 'tcp', 'tls', 'ws' or 'wss' (got 'quic')",
        ),
        ("mqtt: {maximum_qos: 3}\n", "mqtt.maximum_qos: Input should be less than or equal to 2"),
        ("limitz: {}\n", "limitz: Extra inputs are not permitted; allowed keys: node_id,"),
        (
            "listeners: [{name: a, prot: tcp}]\n",
            "listeners.0.prot: Extra inputs are not permitted; allowed keys: name, protocol,",
        ),
        (
            "listeners: [{name: a, protocol: tls}]\n",
            "listeners.0: Value error, protocol 'tls' needs a tls section",
        ),
        (
            "metrics: {port: 70000}\n",
            "metrics.port: Input should be less than or equal to 65535 (got 70000)",
        ),
    ],
    ids=["literal", "bound", "unknown-section", "unknown-listener-key", "tls-missing", "port"],
)
def test_errors_name_field_and_allowed_values(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    lines = _errors(tmp_path, yaml_text)
    assert any(line.startswith(expected) for line in lines), lines


def test_check_config_prints_the_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("shutdown: {grace: 3}\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "shutdown.grace: Extra inputs are not permitted; allowed keys: grace_s" in err
    path.write_text("shutdown: {grace_s: 3}\n")
    # (--no-bind: the default ports, 1883 and 9090, may be taken on a shared machine)
    assert main(["check-config", "--no-bind", str(path)]) == 0


@pytest.mark.parametrize(
    ("protocol", "port"),
    [("tcp", 1884), ("tls", 8884), ("ws", 8083), ("wss", 8443)],
    ids=["tcp", "tls", "ws", "wss"],
)
def test_default_port_by_protocol(protocol: str, port: int) -> None:
    tls = {"cert_file": "c.pem", "key_file": "k.pem"} if protocol in ("tls", "wss") else None
    listener = ListenerConfig.model_validate({"protocol": protocol, "tls": tls})
    assert listener.port == port


def test_client_certificates_need_a_ca() -> None:
    with pytest.raises(ValidationError, match="needs ca_file"):
        TlsConfig(cert_file=Path("c"), key_file=Path("k"), client_certs="required")


def test_environment_overrides_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMQ_METRICS__PORT", "0")
    monkeypatch.setenv("XMQ_SHUTDOWN__SERVER_REFERENCE", "other:1884")
    config = load_config()
    assert config.metrics.port == 0
    assert config.shutdown.server_reference == "other:1884"

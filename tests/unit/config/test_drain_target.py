"""`xmq drain` finds the local node's admin port from its config (the pod's preStop hook)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmq.app.cli import _admin_url, main
from xmq.contract.pod import CONFIG_FILE_ENV, HEALTH_PORT


def test_default_is_the_pod_health_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_FILE_ENV, raising=False)
    assert _admin_url(None) == f"http://127.0.0.1:{HEALTH_PORT}"


def test_port_comes_from_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "xmq.yaml"
    config.write_text("metrics: {port: 19999}\n")
    assert _admin_url(str(config)) == "http://127.0.0.1:19999"
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    assert _admin_url(None) == "http://127.0.0.1:19999"


def test_unreachable_node_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drain", "--url", "http://127.0.0.1:9"]) == 1
    assert "drain failed" in capsys.readouterr().err

"""Start-up errors of real ``xmq serve`` / ``xmq check-config`` processes: one line naming the
field or the file, a non-zero exit, never a traceback; ``check-config`` finds what ``serve``
would fail on (files, certificate pairs, ports, hosts, duplicate listeners)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.certificates import TestCertificateAuthority
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

COMMANDS = ("check-config", "serve")


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def _run(
    command: str, path: Path, env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
) -> Outcome:
    args = [sys.executable, "-m", "xmq", command, *extra]
    args += ["--config", str(path)] if command == "serve" else [str(path)]
    full_env = dict(os.environ, XMQ_SYS__INTERVAL_S="0", **(env or {}))
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=60, env=full_env, check=False
        )
    except subprocess.TimeoutExpired as error:  # serve started instead of refusing
        raise AssertionError(f"{command} did not exit: {error.stderr!r}") from error
    return Outcome(done.returncode, done.stdout, done.stderr)


def _refused(outcome: Outcome, *expected: str) -> str:
    """The single stderr line, after checking the exit code and that it names ``expected``."""
    assert outcome.code != 0, outcome
    assert "Traceback" not in outcome.stderr + outcome.stdout, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(cert, key, another key): a server pair and a key that is not its own."""
    directory = tmp_path_factory.mktemp("startup-tls")
    ca = TestCertificateAuthority(directory)
    server = ca.issue("127.0.0.1", "server")
    other = ca.issue("127.0.0.1", "other")
    yield server.cert_file, server.key_file, other.key_file


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xmq.yaml"
    path.write_text("metrics: {enabled: false}\n" + text)
    return path


def _tls_listener(cert: Path, key: Path) -> str:
    return (
        "listeners:\n"
        "  - name: mqtts\n"
        "    protocol: tls\n"
        "    host: 127.0.0.1\n"
        "    port: 0\n"
        f"    tls: {{cert_file: '{cert}', key_file: '{key}'}}\n"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_yaml_syntax_error(tmp_path: Path, command: str) -> None:
    path = tmp_path / "xmq.yaml"
    path.write_text("listeners:\n  - name: a\n   port: 3\n")
    line = _refused(_run(command, path), str(path), "YAML syntax error at line 3")
    assert line.startswith("xmq: ")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_a_mapping(tmp_path: Path, command: str) -> None:
    path = tmp_path / "xmq.yaml"
    path.write_text("- listeners\n- mqtt\n")
    _refused(_run(command, path), str(path), "not a YAML mapping")


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_listeners_json_in_the_environment(tmp_path: Path, command: str) -> None:
    path = _config(tmp_path, "")
    _refused(_run(command, path, {"XMQ_LISTENERS": '[{"name": x'}), "XMQ_LISTENERS", "JSON")


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_environment_value_names_field_and_variable(tmp_path: Path, command: str) -> None:
    path = _config(tmp_path, "")
    outcome = _run(command, path, {"XMQ_SHUTDOWN__GRACE_S": "soon"})
    _refused(outcome, "shutdown.grace_s", "XMQ_SHUTDOWN__GRACE_S", "'soon'")


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_accounts_file(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nowhere" / "accounts.yaml"
    path = _config(tmp_path, f"auth: {{accounts_file: '{missing}'}}\n")
    _refused(_run(command, path), "auth.accounts_file", str(missing))


@pytest.mark.parametrize("case", ["missing-certificate", "key-as-certificate", "not-a-pair"])
@pytest.mark.parametrize("command", COMMANDS)
def test_certificate_files(
    tmp_path: Path, command: str, case: str, pair: tuple[Path, Path, Path]
) -> None:
    """A missing certificate names its path; a key given as the certificate, and a key that
    is not the certificate's, are named as such."""
    cert, key, other = pair
    missing = tmp_path / "gone.crt"
    files, expected = {
        "missing-certificate": ((missing, key), ("listeners.0.tls.cert_file", str(missing))),
        "key-as-certificate": ((key, key), ("listeners.0.tls.cert_file", str(key), "private key")),
        "not-a-pair": ((cert, other), ("listeners.0.tls", "not a pair", str(other))),
    }[case]
    _refused(_run(command, _config(tmp_path, _tls_listener(*files))), *expected)


@pytest.mark.parametrize("command", COMMANDS)
def test_port_in_use(tmp_path: Path, command: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        path = _config(tmp_path, f"listeners: [{{name: a, host: 127.0.0.1, port: {port}}}]\n")
        _refused(_run(command, path), "listeners.0 (a)", f"127.0.0.1:{port}", "in use")


def test_check_config_no_bind_leaves_out_the_test_binds(tmp_path: Path) -> None:
    """For the file of a node that is running (its ports are taken: by itself)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        path = _config(tmp_path, f"listeners: [{{name: a, host: 127.0.0.1, port: {port}}}]\n")
        outcome = _run("check-config", path, extra=("--no-bind",))
        assert outcome.code == 0, outcome
        assert outcome.stdout.strip() == f"{path}: OK"


@pytest.mark.parametrize("command", COMMANDS)
def test_unknown_host(tmp_path: Path, command: str) -> None:
    path = _config(tmp_path, "listeners: [{name: a, host: no-such-host.invalid, port: 0}]\n")
    _refused(_run(command, path), "listeners.0 (a)", "unknown host 'no-such-host.invalid'")


@pytest.mark.parametrize("command", COMMANDS)
def test_duplicate_listener_ports(tmp_path: Path, command: str) -> None:
    port = free_port()
    path = _config(
        tmp_path,
        f"listeners:\n  - {{name: a, port: {port}}}\n"
        f"  - {{name: b, protocol: ws, host: 127.0.0.1, port: {port}}}\n",
    )
    _refused(_run(command, path), "listeners.1 (b)", f"port {port}", "listeners.0 (a)")


@pytest.mark.parametrize("command", COMMANDS)
def test_metrics_port_on_a_listener_port(tmp_path: Path, command: str) -> None:
    port = free_port()
    path = tmp_path / "xmq.yaml"
    path.write_text(
        f"listeners: [{{name: a, host: 127.0.0.1, port: {port}}}]\n"
        f"metrics: {{host: 127.0.0.1, port: {port}}}\n"
    )
    _refused(_run(command, path), "metrics.port", f"port {port}", "listeners.0 (a)")


@pytest.mark.parametrize("command", COMMANDS)
def test_cluster_link_port_on_a_listener_port(tmp_path: Path, command: str) -> None:
    port = free_port()
    path = _config(
        tmp_path,
        f"listeners: [{{name: a, host: 127.0.0.1, port: {port}}}]\n"
        "cluster: {redis_url: 'redis://127.0.0.1:1/0', "
        f"link_host: 127.0.0.1, link_port: {port}}}\n",
    )
    _refused(_run(command, path), "cluster.link_port", f"port {port}", "listeners.0 (a)")


def test_metrics_port_in_use_fails_the_start(tmp_path: Path) -> None:
    """It used to log an error and run on without /healthz."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        path = tmp_path / "xmq.yaml"
        path.write_text(
            "listeners: [{name: a, host: 127.0.0.1, port: 0}]\n"
            f"metrics: {{host: 127.0.0.1, port: {port}}}\n"
        )
        _refused(_run("check-config", path), "metrics.port", f"127.0.0.1:{port}", "in use")
        _refused(_run("serve", path), "metrics.port", f"127.0.0.1:{port}", "in use")


def test_check_config_passes_what_serve_can_start(
    tmp_path: Path, pair: tuple[Path, Path, Path]
) -> None:
    cert, key, _other = pair
    path = _config(tmp_path, _tls_listener(cert, key))
    outcome = _run("check-config", path)
    assert outcome.code == 0, outcome
    assert outcome.stdout.strip() == f"{path}: OK"


def test_admin_token_file_missing_or_too_short(tmp_path: Path) -> None:
    token_file = tmp_path / "admin-token"
    path = _config(tmp_path, "")
    path.write_text(f"metrics: {{admin_token_file: '{token_file}'}}\n")
    _refused(_run("check-config", path), "metrics.admin_token_file", str(token_file))
    token_file.write_text("short\n")
    _refused(_run("serve", path), "metrics.admin_token_file", "at least 16")

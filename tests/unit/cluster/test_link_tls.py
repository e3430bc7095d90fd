"""``cluster.link_tls``: config validation, loading the files, and a verified handshake."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.support.certificates import TestCertificateAuthority
from xmq.app.cli import main
from xmq.cluster import link_tls
from xmq.cluster.link_tls import LinkTlsError, link_tls_contexts
from xmq.config import LinkTlsConfig, load_config
from xmq.config.reference_doc import describe_errors


def test_the_three_files_are_required_and_named() -> None:
    with pytest.raises(ValidationError) as caught:
        load_config(cluster={"link_tls": {"cert_file": "/x.crt"}})
    lines = describe_errors(caught.value)
    assert "cluster.link_tls.key_file: Field required" in lines
    assert "cluster.link_tls.ca_file: Field required" in lines
    with pytest.raises(ValidationError) as caught:
        load_config(
            cluster={"link_tls": {"cert_file": "a", "key_file": "b", "ca_file": "c", "x": 0}}
        )
    assert describe_errors(caught.value)[0].startswith("cluster.link_tls.x: Extra inputs")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    ca = TestCertificateAuthority(tmp_path)
    pair = ca.issue("node", "node", node=True)

    def config(cert: Path, key: Path, authority: Path) -> LinkTlsConfig:
        return LinkTlsConfig(cert_file=cert, key_file=key, ca_file=authority)

    missing = tmp_path / "nope"
    with pytest.raises(LinkTlsError, match=r"cluster.link_tls.key_file: file not found: .*nope"):
        link_tls_contexts(config(pair.cert_file, missing, ca.ca_file))
    with pytest.raises(LinkTlsError, match="cluster.link_tls.ca_file: file not found"):
        link_tls_contexts(config(pair.cert_file, pair.key_file, missing))
    with pytest.raises(LinkTlsError, match="cluster.link_tls.cert_file: file not found"):
        link_tls_contexts(config(missing, pair.key_file, ca.ca_file))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(LinkTlsError, match="cannot load the certificates"):
        link_tls_contexts(config(garbage, pair.key_file, ca.ca_file))


async def _handshake(server_side: LinkTlsConfig, client_side: LinkTlsConfig) -> None:
    server_tls = link_tls_contexts(server_side)
    client_tls = link_tls_contexts(client_side)
    accepted: list[bool] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_tls.server)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls.client)
        assert await reader.read(2) == b"ok"
        writer.close()
    finally:
        server.close()


def test_nodes_of_one_ca_link_and_a_foreign_server_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ca = TestCertificateAuthority(tmp_path / "ours")
    other = TestCertificateAuthority(tmp_path / "theirs", "other CA")

    def node(authority: TestCertificateAuthority, name: str) -> LinkTlsConfig:
        pair = authority.issue(name, name, node=True)
        return LinkTlsConfig(cert_file=pair.cert_file, key_file=pair.key_file, ca_file=ca.ca_file)

    asyncio.run(_handshake(node(ca, "n1"), node(ca, "n2")))
    with pytest.raises(ssl.SSLCertVerificationError):  # the dialer refuses another CA's server
        asyncio.run(_handshake(node(other, "bad"), node(ca, "n3")))


def test_serve_refuses_a_missing_link_file_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "xmq.yaml"
    config.write_text(
        "cluster:\n"
        "  redis_url: redis://127.0.0.1:1/0\n"
        f"  link_tls: {{cert_file: {tmp_path}/n.crt, key_file: {tmp_path}/n.key, "
        f"ca_file: {tmp_path}/ca.pem}}\n"
    )
    assert main(["serve", "--config", str(config)]) == 2
    assert "cluster.link_tls.cert_file: file not found" in capsys.readouterr().err


def test_a_refused_peer_is_warned_about_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    error = ssl.SSLCertVerificationError("certificate verify failed")
    with caplog.at_level(logging.DEBUG, logger="xmq.cluster"):
        link_tls.log_refused("from", "10.9.8.7:40001", error, now=1000.0)
        link_tls.log_refused("from", "10.9.8.7:40002", error, now=1030.0)  # another port
        link_tls.log_refused("from", "10.9.8.6:40003", error, now=1030.0)  # another peer
        link_tls.log_refused("from", "10.9.8.7:40004", error, now=1061.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "10.9.8.7:40001" in warnings[0]
    assert "10.9.8.6:40003" in warnings[1]
    assert "10.9.8.7:40004" in warnings[2]
    assert any(r.levelno == logging.DEBUG and "40002" in r.getMessage() for r in caplog.records)


def test_reload_swaps_the_contexts_or_keeps_them_naming_the_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = TestCertificateAuthority(tmp_path)
    pair = ca.issue("node", "node", node=True)
    tls = link_tls_contexts(
        LinkTlsConfig(cert_file=pair.cert_file, key_file=pair.key_file, ca_file=ca.ca_file)
    )
    first = (tls.server, tls.client)
    ca.issue("node", "node", node=True, at=tmp_path)
    assert tls.reload()
    assert tls.server is not first[0] and tls.client is not first[1]
    kept = (tls.server, tls.client)
    pair.key_file.write_text("not a key")
    with caplog.at_level(logging.ERROR, logger="xmq.cluster"):
        assert not tls.reload()
    assert (tls.server, tls.client) == kept
    assert str(pair.key_file) in caplog.text and "old ones kept" in caplog.text
    assert tls.reloads == 1

"""Who may call the admin endpoints: the token, else loopback only; over a real socket."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from xmq.observability.admin_access import (
    AdminAccess,
    AdminTokenError,
    is_loopback,
    read_admin_token,
)
from xmq.observability.http_endpoint import ObservabilityEndpoint
from xmq.observability.readiness import LoopLagMonitor, ReadinessChecks

TOKEN = b"0123456789abcdef-token"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.8.7", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.1.2.3", False),
        ("::ffff:10.1.2.3", False),
        ("fe80::1%eth0", False),
        ("0.0.0.0", False),
        ("localhost", False),  # peers are addresses, never names
        ("", False),
        (None, False),
    ],
)
def test_loopback_addresses(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_a_token_only_loopback() -> None:
    access = AdminAccess()
    assert access.refusal(None, "127.0.0.1") is None
    refusal = access.refusal(b"Bearer " + TOKEN, "10.0.0.7")
    assert refusal is not None and refusal.status == 403
    assert access.header() is None


def test_with_a_token_every_address_needs_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(TOKEN + b"\n")
    access = AdminAccess(token_file)
    for peer in ("127.0.0.1", "10.0.0.7"):
        assert access.refusal(b"Bearer " + TOKEN, peer) is None
        assert access.refusal(b"bearer  " + TOKEN + b" ", peer) is None
        for wrong in (None, b"", b"Bearer", b"Bearer x", b"Basic " + TOKEN, TOKEN):
            refusal = access.refusal(wrong, peer)
            assert refusal is not None and refusal.status == 401, wrong
    assert access.header() == "Bearer " + TOKEN.decode()


def test_a_rotated_or_broken_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(TOKEN)
    access = AdminAccess(token_file)
    token_file.write_bytes(b"another-token-of-20-chars")  # a rotated Secret: no restart
    assert access.refusal(b"Bearer " + TOKEN, "127.0.0.1") is not None
    assert access.refusal(b"Bearer another-token-of-20-chars", "127.0.0.1") is None
    token_file.unlink()  # unreadable: every admin request refused, loopback too
    refusal = access.refusal(b"Bearer " + TOKEN, "127.0.0.1")
    assert refusal is not None and refusal.status == 503


def test_short_or_empty_tokens_are_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    for text in (b"", b"  \n", b"short-token"):
        token_file.write_bytes(text)
        with pytest.raises(AdminTokenError, match="at least 16"):
            read_admin_token(token_file)
    with pytest.raises(AdminTokenError, match="cannot read"):
        read_admin_token(tmp_path / "missing")


async def _post(port: int, path: str, authorization: str | None) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = f"authorization: {authorization}\r\n" if authorization else ""
    writer.write(f"POST {path} HTTP/1.1\r\nhost: t\r\n{extra}content-length: 0\r\n\r\n".encode())
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if int(head.split(b" ", 2)[1]) == 401:
        assert b"www-authenticate: Bearer" in head
    return int(head.split(b" ", 2)[1]), body


async def test_the_endpoint_checks_before_any_action(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(TOKEN)
    endpoint = ObservabilityEndpoint(
        CollectorRegistry(), ReadinessChecks(), LoopLagMonitor(), admin=AdminAccess(token_file)
    )
    calls: list[Mapping[str, str]] = []

    async def drain(query: Mapping[str, str]) -> str:
        calls.append(query)
        return "draining"

    endpoint.actions["drain"] = drain
    _host, port = await endpoint.start("127.0.0.1", 0)
    try:
        assert (await _post(port, "/admin/drain", None))[0] == 401
        assert (await _post(port, "/admin/nothing", None))[0] == 401  # no route probing
        assert (await _post(port, "/admin/drain", "Bearer wrong-token-xxxxxxxx"))[0] == 401
        assert calls == []
        status, body = await _post(port, "/admin/drain", f"Bearer {TOKEN.decode()}")
        assert (status, body.strip()) == (202, b"draining")
        assert len(calls) == 1
    finally:
        await endpoint.stop()

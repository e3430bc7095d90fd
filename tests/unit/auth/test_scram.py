from __future__ import annotations

import base64

import pytest

from xmq.auth.scram import (
    ScramClient,
    ScramError,
    ScramServer,
    decode_saslname,
    encode_saslname,
    parse_client_first,
)
from xmq.auth.verifiers import derive_scram_credentials

# RFC 7677 §3 example.
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
PENCIL = derive_scram_credentials(
    "pencil", iterations=4096, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
)


def test_rfc7677_server_side() -> None:
    server = ScramServer(nonce=SERVER_NONCE)
    first = server.receive_client_first(CLIENT_FIRST)
    assert first.username == "user"
    assert server.server_first(PENCIL) == SERVER_FIRST
    assert server.receive_client_final(CLIENT_FINAL) == SERVER_FINAL


def test_rfc7677_client_side() -> None:
    client = ScramClient("user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.client_first() == CLIENT_FIRST
    assert client.client_final(SERVER_FIRST) == CLIENT_FINAL
    client.verify_server_final(SERVER_FINAL)
    with pytest.raises(ScramError):
        client.verify_server_final(b"v=" + base64.b64encode(bytes(32)))


def _run(username: str, password: str, creds_password: str = "pencil") -> bytes:
    creds = derive_scram_credentials(creds_password, iterations=512)
    client, server = ScramClient(username, password), ScramServer()
    server.receive_client_first(client.client_first())
    final = server.receive_client_final(client.client_final(server.server_first(creds)))
    client.verify_server_final(final)
    return final


def test_full_exchange_with_awkward_user_name() -> None:
    assert _run("a,b=c", "pencil").startswith(b"v=")


def test_wrong_password_is_invalid_proof() -> None:
    with pytest.raises(ScramError) as info:
        _run("user", "pencik")
    assert info.value.error == "invalid-proof"
    assert info.value.server_final() == b"e=invalid-proof"


def test_unknown_user_gets_a_plausible_server_first_then_fails() -> None:
    client, server = ScramClient("ghost", "pencil"), ScramServer()
    server.receive_client_first(client.client_first())
    reply = server.server_first(None, fake_salt=b"0123456789abcdef")
    assert b",s=MDEyMzQ1Njc4OWFiY2RlZg==,i=4096" in reply
    with pytest.raises(ScramError, match="invalid-proof"):
        server.receive_client_final(client.client_final(reply))


def _final_with(server_first: bytes, client: ScramClient, mutate: bytes, to: bytes) -> bytes:
    return client.client_final(server_first).replace(mutate, to, 1)


@pytest.mark.parametrize(
    ("mutate", "to", "error"),
    [
        (b"c=biws", b"c=eSws", "channel-bindings-dont-match"),
        (b"c=biws", b"c=!!", "other-error"),
        (b",r=", b",r=x", "other-error"),
        (b",p=", b",p=AAAA", "invalid-proof"),
        (b",p=", b",x=", "other-error"),
    ],
    ids=["other-gs2-header", "bad-base64", "nonce-changed", "proof-changed", "no-proof"],
)
def test_tampered_client_final(mutate: bytes, to: bytes, error: str) -> None:
    client, server = ScramClient("user", "pencil"), ScramServer()
    server.receive_client_first(client.client_first())
    reply = server.server_first(PENCIL)
    with pytest.raises(ScramError) as info:
        server.receive_client_final(_final_with(reply, client, mutate, to))
    assert info.value.error == error


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"", "other-error"),
        (b"\xff\xfe", "invalid-encoding"),
        (b"p=tls-unique,,n=user,r=abc", "channel-binding-not-supported"),
        (b"x,,n=user,r=abc", "other-error"),
        (b"n,,m=ext,n=user,r=abc", "extensions-not-supported"),
        (b"n,,r=abc,n=user", "other-error"),
        (b"n,,n=us=er,r=abc", "invalid-username-encoding"),
        (b"n,a=other,n=user,r=abc", "invalid-proof"),
        (b"n,,n=user,r=a,bc", "invalid-encoding"),
        (b"n,,n=user,r=", "other-error"),
        (b"n,,n=user,r=ab c", "other-error"),
        (b"n,,n=user", "other-error"),
        (b"n" * 5000, "other-error"),
    ],
    ids=[
        "empty",
        "not-utf8",
        "channel-binding",
        "bad-gs2-flag",
        "mandatory-extension",
        "attribute-order",
        "bad-saslname-escape",
        "authzid-differs",
        "comma-in-nonce",
        "empty-nonce",
        "space-in-nonce",
        "no-nonce",
        "too-long",
    ],
)
def test_bad_client_first(message: bytes, error: str) -> None:
    with pytest.raises(ScramError) as info:
        parse_client_first(message)
    assert info.value.error == error


def test_accepts_y_flag_and_matching_authzid() -> None:
    first = parse_client_first(b"y,a=us=2Cer,n=us=2Cer,r=abc")
    assert first.username == "us,er"
    assert first.gs2_header == "y,a=us=2Cer,"


def test_saslname_round_trip() -> None:
    for name in ["plain", "a,b", "a=b", "=2C", ",=,="]:
        assert decode_saslname(encode_saslname(name)) == name


def test_out_of_order_calls_fail() -> None:
    server = ScramServer()
    with pytest.raises(ScramError):
        server.server_first(PENCIL)
    with pytest.raises(ScramError):
        server.receive_client_final(CLIENT_FINAL)
    server.receive_client_first(CLIENT_FIRST)
    with pytest.raises(ScramError):
        server.receive_client_first(CLIENT_FIRST)
    server.server_first(PENCIL)
    with pytest.raises(ScramError):
        server.server_first(PENCIL)

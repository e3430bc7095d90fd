"""Sans-IO SCRAM-SHA-256 (RFC 5802 / RFC 7677), server side and a small client side.

No channel binding: a client-first message asking for it ("p=...") is refused; "n" and
"y" GS2 flags are accepted (we never advertise the -PLUS variant).

Server use:

    server = ScramServer()
    first = server.receive_client_first(data)       # -> ClientFirst (user name, nonce)
    reply = server.server_first(credentials_or_None)  # look the user up in between
    final = server.receive_client_final(data)       # -> server-final bytes, or ScramError
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

from xmq.auth.verifiers import (
    ScramCredentials,
    scram_client_key,
    scram_salted_password,
    scram_server_key,
)

MECHANISM: Final = "SCRAM-SHA-256"
_NONCE_BYTES: Final = 18
_MAX_MESSAGE: Final = 4096


class ScramError(Exception):
    """The exchange failed. `error` is the RFC 5802 server-error value."""

    def __init__(self, error: str, detail: str | None = None) -> None:
        super().__init__(detail or error)
        self.error = error

    def server_final(self) -> bytes:
        return f"e={self.error}".encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, error: str = "other-error") -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ScramError(error, "bad base64") from exc


def _decode(data: bytes | None) -> str:
    if not data:
        raise ScramError("other-error", "empty SCRAM message")
    if len(data) > _MAX_MESSAGE:
        raise ScramError("other-error", "SCRAM message too long")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScramError("invalid-encoding", "SCRAM message is not UTF-8") from exc


def _attributes(text: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        if len(item) < 2 or item[1] != "=" or not item[0].isalpha():
            raise ScramError("invalid-encoding", "malformed SCRAM attribute")
        pairs.append((item[0], item[2:]))
    return pairs


def decode_saslname(text: str) -> str:
    """saslname: ',' and '=' are escaped as =2C and =3D; any other '=' is an error."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "=":
            escape = text[index : index + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise ScramError("invalid-username-encoding")
            index += 3
        else:
            out.append(char)
            index += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def new_nonce() -> str:
    return _b64(os.urandom(_NONCE_BYTES))


@dataclass(frozen=True, slots=True)
class ClientFirst:
    username: str
    client_nonce: str
    gs2_header: str
    bare: str


def parse_client_first(data: bytes | None) -> ClientFirst:
    text = _decode(data)
    flag, sep, rest = text.partition(",")
    if not sep:
        raise ScramError("other-error", "missing GS2 header")
    if flag.startswith("p="):
        raise ScramError("channel-binding-not-supported")
    if flag not in ("n", "y"):
        raise ScramError("other-error", "bad GS2 channel-binding flag")
    authzid, sep, bare = rest.partition(",")
    if not sep:
        raise ScramError("other-error", "missing GS2 header")
    attrs = _attributes(bare)
    if attrs and attrs[0][0] == "m":
        raise ScramError("extensions-not-supported")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise ScramError("other-error", "client-first needs n= and r=")
    username = decode_saslname(attrs[0][1])
    if authzid and (not authzid.startswith("a=") or decode_saslname(authzid[2:]) != username):
        raise ScramError("invalid-proof", "authorization identity differs from user")
    nonce = attrs[1][1]
    if not _valid_nonce(nonce):
        raise ScramError("other-error", "bad client nonce")
    return ClientFirst(username, nonce, f"{flag},{authzid},", bare)


class ScramServer:
    """One server-side SCRAM-SHA-256 conversation (three calls, in order)."""

    __slots__ = (
        "_client_first",
        "_server_first",
        "_nonce",
        "_credentials",
        "_fake_credentials",
        "_done",
    )

    def __init__(self, nonce: str | None = None) -> None:
        self._client_first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = nonce
        self._credentials: ScramCredentials | None = None
        self._fake_credentials = False
        self._done = False

    @property
    def username(self) -> str | None:
        return self._client_first.username if self._client_first else None

    def receive_client_first(self, data: bytes | None) -> ClientFirst:
        if self._client_first is not None:
            raise ScramError("other-error", "client-first already received")
        self._client_first = parse_client_first(data)
        return self._client_first

    def server_first(
        self,
        credentials: ScramCredentials | None,
        *,
        fake_salt: bytes = b"",
        iterations: int = 4096,
    ) -> bytes:
        """The server-first message. Pass None for an unknown user (or one without SCRAM
        credentials): the exchange continues with a fake salt and fails at the proof, so
        the reply does not reveal whether the user exists. `fake_salt` should be stable
        per user name (e.g. an HMAC of it with a server secret)."""
        first = self._client_first
        if first is None or self._server_first:
            raise ScramError("other-error", "server-first out of order")
        if credentials is None:
            self._fake_credentials = True
            salt = fake_salt or hashlib.sha256(first.username.encode()).digest()[:16]
            credentials = ScramCredentials(salt, iterations, bytes(32), bytes(32))
        self._credentials = credentials
        combined = first.client_nonce + (self._nonce or new_nonce())
        self._nonce = combined
        self._server_first = f"r={combined},s={_b64(credentials.salt)},i={credentials.iterations}"
        return self._server_first.encode()

    def receive_client_final(self, data: bytes | None) -> bytes:
        """Verify the client proof; return the server-final message ("v=...").
        Raises ScramError on any error (its `server_final()` is the e= message)."""
        first, credentials = self._client_first, self._credentials
        if first is None or credentials is None or self._done:
            raise ScramError("other-error", "client-final out of order")
        self._done = True
        text = _decode(data)
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramError("other-error", "client-final without proof")
        attrs = _attributes(without_proof)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise ScramError("other-error", "client-final needs c= and r=")
        if _unb64(attrs[0][1]) != first.gs2_header.encode():
            raise ScramError("channel-bindings-dont-match")
        if not hmac.compare_digest(attrs[1][1].encode(), (self._nonce or "").encode()):
            raise ScramError("other-error", "nonce mismatch")
        proof = _unb64(proof_text, "invalid-proof")
        if len(proof) != 32 or self._fake_credentials:
            raise ScramError("invalid-proof")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(credentials.stored_key, auth_message, "sha256")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), credentials.stored_key):
            raise ScramError("invalid-proof")
        server_signature = hmac.digest(credentials.server_key, auth_message, "sha256")
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """Client side of SCRAM-SHA-256 (for tests and tools)."""

    __slots__ = ("_username", "_password", "_nonce", "_bare", "_server_signature")

    def __init__(self, username: str, password: bytes | str, nonce: str | None = None) -> None:
        self._username = username
        self._password = password
        self._nonce = nonce or new_nonce()
        self._bare = ""
        self._server_signature = b""

    def client_first(self) -> bytes:
        self._bare = f"n={encode_saslname(self._username)},r={self._nonce}"
        return f"n,,{self._bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(_attributes(text))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("other-error", "server nonce does not extend ours")
        if not iterations.isdigit():
            raise ScramError("other-error", "bad iteration count")
        salted = scram_salted_password(self._password, _unb64(salt), int(iterations))
        client_key = scram_client_key(salted)
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.digest(scram_server_key(salted), auth_message, "sha256")
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        text = server_final.decode()
        if text.startswith("e="):
            raise ScramError(text[2:])
        if not text.startswith("v=") or not hmac.compare_digest(
            _unb64(text[2:]), self._server_signature
        ):
            raise ScramError("invalid-server-signature")

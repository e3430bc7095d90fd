"""Password verifiers: slow-hash strings with their cost inside, and SCRAM-SHA-256 credentials.

Formats (salt and hashes in base64 without padding):

    pbkdf2-sha256$i=600000$<salt>$<hash>
    scrypt$n=32768,r=8,p=1$<salt>$<hash>
    SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>     (PostgreSQL's format, padded base64)

Everything here is CPU work and blocking: callers on an event loop run `hash_password`
and `verify_password` in a thread (hashlib releases the GIL while hashing).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final, Literal

from xmq.auth.saslprep import scram_password_bytes

PBKDF2_SHA256: Final = "pbkdf2-sha256"
SCRYPT: Final = "scrypt"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"

Algorithm = Literal["pbkdf2-sha256", "scrypt"]

_MAX_PBKDF2_ITERATIONS: Final = 10_000_000
_MAX_SCRYPT_MEMORY: Final = 256 * 1024 * 1024


class VerifierError(ValueError):
    """A verifier string that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class HashPolicy:
    """The cost new verifiers get; verifiers below it are re-hashed on the next login."""

    algorithm: Algorithm = "pbkdf2-sha256"
    pbkdf2_iterations: int = 600_000
    scrypt_n: int = 2**15
    scrypt_r: int = 8
    scrypt_p: int = 1
    scram_iterations: int = 4096
    salt_bytes: int = 16

    def __post_init__(self) -> None:
        if self.algorithm not in (PBKDF2_SHA256, SCRYPT):
            raise ValueError(f"unknown password hash algorithm {self.algorithm!r}")
        if self.pbkdf2_iterations < 1 or self.scram_iterations < 1:
            raise ValueError("iterations must be positive")
        if self.scrypt_n < 2 or self.scrypt_n & (self.scrypt_n - 1):
            raise ValueError("scrypt n must be a power of two above 1")
        if self.scrypt_r < 1 or self.scrypt_p < 1 or self.salt_bytes < 8:
            raise ValueError("scrypt r and p must be positive, salt at least 8 bytes")


@dataclass(frozen=True, slots=True)
class ParsedVerifier:
    algorithm: Algorithm
    params: dict[str, int]
    salt: bytes
    digest: bytes


def b64encode_unpadded(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def b64decode_unpadded(text: str) -> bytes:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise VerifierError("bad base64 in verifier") from exc


def _password_bytes(password: bytes | str) -> bytes:
    return password.encode() if isinstance(password, str) else password


def _parse_params(text: str) -> dict[str, int]:
    params: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit() or key in params:
            raise VerifierError("bad verifier parameters")
        params[key] = int(value)
    return params


def parse_verifier(verifier: str) -> ParsedVerifier:
    parts = verifier.split("$")
    if len(parts) != 4:
        raise VerifierError("a verifier has four '$'-separated fields")
    algorithm, param_text, salt_text, digest_text = parts
    params = _parse_params(param_text)
    salt, digest = b64decode_unpadded(salt_text), b64decode_unpadded(digest_text)
    if not salt or len(digest) < 16:
        raise VerifierError("verifier salt or hash too short")
    if algorithm == PBKDF2_SHA256:
        if set(params) != {"i"} or not 1 <= params["i"] <= _MAX_PBKDF2_ITERATIONS:
            raise VerifierError("pbkdf2-sha256 needs i=<iterations>")
        return ParsedVerifier(PBKDF2_SHA256, params, salt, digest)
    if algorithm == SCRYPT:
        if set(params) != {"n", "r", "p"}:
            raise VerifierError("scrypt needs n=,r=,p=")
        n, r, p = params["n"], params["r"], params["p"]
        if n < 2 or n & (n - 1) or r < 1 or p < 1 or _scrypt_memory(n, r, p) > _MAX_SCRYPT_MEMORY:
            raise VerifierError("scrypt parameters out of range")
        return ParsedVerifier(SCRYPT, params, salt, digest)
    raise VerifierError(f"unknown verifier algorithm {algorithm!r}")


def _scrypt_memory(n: int, r: int, p: int) -> int:
    return 128 * r * (n + p + 2)


def _derive(algorithm: Algorithm, params: dict[str, int], password: bytes, salt: bytes) -> bytes:
    if algorithm == PBKDF2_SHA256:
        return hashlib.pbkdf2_hmac("sha256", password, salt, params["i"], 32)
    n, r, p = params["n"], params["r"], params["p"]
    return hashlib.scrypt(
        password, salt=salt, n=n, r=r, p=p, maxmem=_scrypt_memory(n, r, p) + 1024 * 1024, dklen=32
    )


def _policy_params(policy: HashPolicy) -> dict[str, int]:
    if policy.algorithm == PBKDF2_SHA256:
        return {"i": policy.pbkdf2_iterations}
    return {"n": policy.scrypt_n, "r": policy.scrypt_r, "p": policy.scrypt_p}


def hash_password(password: bytes | str, policy: HashPolicy | None = None) -> str:
    """A new verifier string for `password` (slow: run it in a thread on an event loop)."""
    policy = policy or HashPolicy()
    salt = os.urandom(policy.salt_bytes)
    params = _policy_params(policy)
    digest = _derive(policy.algorithm, params, _password_bytes(password), salt)
    param_text = ",".join(f"{key}={value}" for key, value in params.items())
    return (
        f"{policy.algorithm}${param_text}${b64encode_unpadded(salt)}${b64encode_unpadded(digest)}"
    )


def verify_password(password: bytes | str, verifier: str) -> bool:
    """True when `password` matches `verifier` (constant-time compare). A malformed
    verifier never matches."""
    try:
        parsed = parse_verifier(verifier)
    except VerifierError:
        return False
    candidate = _derive(parsed.algorithm, parsed.params, _password_bytes(password), parsed.salt)
    return hmac.compare_digest(candidate[: len(parsed.digest)], parsed.digest)


def needs_rehash(verifier: str, policy: HashPolicy) -> bool:
    """True when `verifier` is weaker than `policy` asks (or uses another algorithm)."""
    try:
        parsed = parse_verifier(verifier)
    except VerifierError:
        return True
    if parsed.algorithm != policy.algorithm:
        return True
    if parsed.algorithm == PBKDF2_SHA256:
        return parsed.params["i"] < policy.pbkdf2_iterations
    return (
        parsed.params["n"] < policy.scrypt_n
        or parsed.params["r"] < policy.scrypt_r
        or parsed.params["p"] < policy.scrypt_p
    )


@dataclass(frozen=True, slots=True)
class ScramCredentials:
    """SCRAM-SHA-256 stored credentials (RFC 5802 §3): what the server keeps."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def encode(self) -> str:
        """PostgreSQL's text form: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>."""
        b64 = base64.b64encode
        return (
            f"{SCRAM_SHA_256}${self.iterations}:{b64(self.salt).decode()}"
            f"${b64(self.stored_key).decode()}:{b64(self.server_key).decode()}"
        )

    @classmethod
    def decode(cls, text: str) -> ScramCredentials:
        try:
            method, cost_salt, keys = text.split("$")
            iteration_text, salt_text = cost_salt.split(":")
            stored_text, server_text = keys.split(":")
        except ValueError as exc:
            raise VerifierError("malformed SCRAM-SHA-256 credentials") from exc
        if method != SCRAM_SHA_256 or not iteration_text.isdigit():
            raise VerifierError("malformed SCRAM-SHA-256 credentials")
        iterations = int(iteration_text)
        salt = b64decode_unpadded(salt_text.rstrip("="))
        stored_key = b64decode_unpadded(stored_text.rstrip("="))
        server_key = b64decode_unpadded(server_text.rstrip("="))
        if not 1 <= iterations <= _MAX_PBKDF2_ITERATIONS or not salt:
            raise VerifierError("SCRAM-SHA-256 iterations or salt out of range")
        if len(stored_key) != 32 or len(server_key) != 32:
            raise VerifierError("SCRAM-SHA-256 keys must be 32 bytes")
        return cls(salt, iterations, stored_key, server_key)


def scram_salted_password(password: bytes | str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword := Hi(Normalize(password), salt, i)."""
    return hashlib.pbkdf2_hmac("sha256", scram_password_bytes(password), salt, iterations, 32)


def scram_client_key(salted_password: bytes) -> bytes:
    return hmac.digest(salted_password, b"Client Key", "sha256")


def scram_server_key(salted_password: bytes) -> bytes:
    return hmac.digest(salted_password, b"Server Key", "sha256")


def derive_scram_credentials(
    password: bytes | str, *, iterations: int = 4096, salt: bytes | None = None
) -> ScramCredentials:
    """Stored SCRAM-SHA-256 credentials for `password` (slow: PBKDF2 with `iterations`)."""
    salt = os.urandom(16) if salt is None else salt
    salted = scram_salted_password(password, salt, iterations)
    stored_key = hashlib.sha256(scram_client_key(salted)).digest()
    return ScramCredentials(salt, iterations, stored_key, scram_server_key(salted))


def scram_needs_rehash(credentials: ScramCredentials | None, policy: HashPolicy) -> bool:
    return credentials is None or credentials.iterations < policy.scram_iterations

from __future__ import annotations

import pytest

from xmq.auth.verifiers import (
    HashPolicy,
    ScramCredentials,
    VerifierError,
    derive_scram_credentials,
    hash_password,
    needs_rehash,
    parse_verifier,
    scram_needs_rehash,
    verify_password,
)

FAST_PBKDF2 = HashPolicy(pbkdf2_iterations=1000)
FAST_SCRYPT = HashPolicy(algorithm="scrypt", scrypt_n=16, scrypt_r=1, scrypt_p=1)


@pytest.mark.parametrize("policy", [FAST_PBKDF2, FAST_SCRYPT], ids=["pbkdf2", "scrypt"])
def test_hash_then_verify(policy: HashPolicy) -> None:
    verifier = hash_password("correct horse", policy)
    assert verifier.startswith(policy.algorithm + "$")
    assert verify_password(b"correct horse", verifier)
    assert verify_password("correct horse", verifier)
    assert not verify_password(b"correct horsf", verifier)
    assert not verify_password(b"", verifier)


def test_each_hash_has_its_own_salt() -> None:
    first, second = hash_password("pw", FAST_PBKDF2), hash_password("pw", FAST_PBKDF2)
    assert first != second
    assert parse_verifier(first).salt != parse_verifier(second).salt


def test_cost_is_inside_the_string() -> None:
    pbkdf2 = parse_verifier(hash_password("pw", FAST_PBKDF2))
    assert pbkdf2.params == {"i": 1000}
    scrypt = parse_verifier(hash_password("pw", FAST_SCRYPT))
    assert scrypt.params == {"n": 16, "r": 1, "p": 1}


def test_known_pbkdf2_vector() -> None:
    # RFC 7914 §11 PBKDF2-HMAC-SHA256 vector: P="passwd", S="salt", c=1.
    expected = "VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw"
    verifier = f"pbkdf2-sha256$i=1$c2FsdA${expected}"
    assert verify_password(b"passwd", verifier)
    assert not verify_password(b"passwe", verifier)


@pytest.mark.parametrize(
    "verifier",
    [
        "",
        "plain-text-password",
        "md5$i=1$c2FsdA$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
        "pbkdf2-sha256$i=0$c2FsdA$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
        "pbkdf2-sha256$i=x$c2FsdA$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
        "pbkdf2-sha256$i=1$c2FsdA$short",
        "pbkdf2-sha256$i=1$$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
        "pbkdf2-sha256$i=1$!!!$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
        "scrypt$n=15,r=8,p=1$c2FsdA$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
        "scrypt$n=1048576,r=64,p=1$c2FsdA$VawEblbjCJ/sFpHCJUS2BflBhSFt3gRl5oudV8INrLw",
    ],
    ids=[
        "empty",
        "clear-text",
        "unknown-algorithm",
        "zero-iterations",
        "non-numeric-cost",
        "short-hash",
        "empty-salt",
        "bad-base64",
        "scrypt-n-not-power-of-two",
        "scrypt-too-much-memory",
    ],
)
def test_malformed_verifiers_never_match(verifier: str) -> None:
    with pytest.raises(VerifierError):
        parse_verifier(verifier)
    assert not verify_password(b"passwd", verifier)
    assert needs_rehash(verifier, FAST_PBKDF2)


def test_needs_rehash_when_cost_rises_or_algorithm_changes() -> None:
    verifier = hash_password("pw", FAST_PBKDF2)
    assert not needs_rehash(verifier, FAST_PBKDF2)
    assert not needs_rehash(verifier, HashPolicy(pbkdf2_iterations=999))
    assert needs_rehash(verifier, HashPolicy(pbkdf2_iterations=1001))
    assert needs_rehash(verifier, FAST_SCRYPT)
    scrypt = hash_password("pw", FAST_SCRYPT)
    assert not needs_rehash(scrypt, FAST_SCRYPT)
    assert needs_rehash(scrypt, HashPolicy(algorithm="scrypt", scrypt_n=32, scrypt_r=1))


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="power of two"):
        HashPolicy(scrypt_n=1000)
    with pytest.raises(ValueError, match="positive"):
        HashPolicy(pbkdf2_iterations=0)


def test_scram_credentials_rfc7677_vector_and_round_trip() -> None:
    import base64

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    creds = derive_scram_credentials("pencil", iterations=4096, salt=salt)
    text = creds.encode()
    assert text.startswith("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$")
    assert ScramCredentials.decode(text) == creds
    assert not scram_needs_rehash(creds, HashPolicy(scram_iterations=4096))
    assert scram_needs_rehash(creds, HashPolicy(scram_iterations=8192))
    assert scram_needs_rehash(None, HashPolicy())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "SCRAM-SHA-1$4096:c2FsdA==$AA==:AA==",
        "SCRAM-SHA-256$x:c2FsdA==$AA==:AA==",
        "SCRAM-SHA-256$4096:c2FsdA==$AA==:AA==",
    ],
    ids=["empty", "other-method", "bad-iterations", "short-keys"],
)
def test_bad_scram_credentials(text: str) -> None:
    with pytest.raises(VerifierError):
        ScramCredentials.decode(text)

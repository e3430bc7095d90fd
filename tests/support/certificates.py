"""A throw-away certificate authority for TLS tests (``cryptography``), files in a temp dir."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class IssuedPair:
    cert_file: Path
    key_file: Path
    serial: int

    def tls_yaml(self) -> str:
        """The pair as a listener's ``tls`` mapping in flow YAML."""
        return f"{{cert_file: {self.cert_file}, key_file: {self.key_file}}}"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


class TestCertificateAuthority:
    """A CA that issues server and client certificates for 127.0.0.1."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "xmq test CA") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = directory / f"{name.replace(' ', '-')}.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        common_name: str,
        file_stem: str,
        server: bool = True,
        at: Path | None = None,
        node: bool = False,
    ) -> IssuedPair:
        """Issue a certificate; ``at`` overwrites an existing pair's files (reload tests).

        ``node``: a cluster node's certificate, usable as server and as client (node links).
        """
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            ).add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH]
                    + ([ExtendedKeyUsageOID.CLIENT_AUTH] if node else [])
                ),
                critical=False,
            )
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        directory = at or self.directory
        cert_file = directory / f"{file_stem}.crt"
        key_file = directory / f"{file_stem}.key"
        # Write to temp names and rename, as a certificate manager would (atomic swap).
        cert_tmp = cert_file.with_suffix(".crt.tmp")
        key_tmp = key_file.with_suffix(".key.tmp")
        cert_tmp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_tmp)
        key_tmp.replace(key_file)
        cert_tmp.replace(cert_file)
        return IssuedPair(cert_file, key_file, serial)

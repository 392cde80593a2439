"""A self-signed TLS certificate for a game day's pages (``gameday keys DIR --tls``), for
closed networks with no certificate authority at hand. Browsers warn once about a
self-signed certificate; the facilitator can check its fingerprint, printed here."""
from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

CERT, KEY = "web.crt", "web.key"
VALID_DAYS = 30  # a game day's certificate, not a server's


def _name(host: str):
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def make_self_signed(directory: Path, hosts: list[str]) -> tuple[Path, Path, str]:
    """web.crt and web.key (owner-only) in ``directory``, valid for ``hosts``, localhost and
    127.0.0.1; returns (certificate, key, SHA-256 fingerprint)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    names = list(dict.fromkeys([*hosts, "localhost", "127.0.0.1"]))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gameday")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([_name(h) for h in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / CERT, directory / KEY
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a key file there before keeps its mode otherwise
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path, cert.fingerprint(hashes.SHA256()).hex(":")

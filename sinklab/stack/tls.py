"""The secure stack's certificates and passwords, made by code the first time a workdir needs them and
kept there (``tls/``, ``secrets/``, both readable by their owner only), so that a stack started again on
the workdir, and every client its stack.json tells about them, keeps working.

- ``tls/ca.pem``: the stack's own certificate authority (what a client trusts: librdkafka's
  ``ssl.ca.location``, Java's PEM truststore);
- ``tls/broker.pem``: the broker's key and its certificate for 127.0.0.1 and localhost, signed by that CA;
- ``secrets/stack.properties``: the generated passwords, by name (``PASSWORDS``), which stack.json and the
  servers' configs name by reference (``${file:<workdir>/secrets/stack.properties:<name>}``), never in clear.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from pathlib import Path

from sinklab.security import properties

SECRETS_FILE = "secrets/stack.properties"
CA_FILE = "tls/ca.pem"
BROKER_PEM = "tls/broker.pem"
# Kafka's broker itself (inter-broker and controller logins; a super user), sinklab's clients (a super user
# too: the stack is theirs), a login with no ACL at all (what a principal without grants meets), the
# catalog's OAuth2 client and the Connect REST API's basic-auth user.
PASSWORDS = ("kafka.admin", "kafka.sinklab", "kafka.guest", "catalog.client-secret", "connect.admin")
KAFKA_USER = "sinklab"
KAFKA_GUEST = "guest"
KAFKA_ADMIN = "admin"
CATALOG_CLIENT_ID = "sinklab"
CONNECT_USER = "admin"
_YEARS = 10


def reference(workdir: Path, name: str) -> str:
    """A password of the stack, by reference."""
    return f"${{file:{workdir / SECRETS_FILE}:{name}}}"


def passwords(workdir: Path) -> dict[str, str]:
    """The stack's passwords, made the first time (random, 32 URL-safe characters each)."""
    path = workdir / SECRETS_FILE
    known = properties(path.read_text()) if path.exists() else {}
    if all(name in known for name in PASSWORDS):
        return known
    made = {name: known.get(name) or secrets.token_urlsafe(24) for name in PASSWORDS}
    _private_dir(path.parent)
    write_private(path, "".join(f"{k}={v}\n" for k, v in made.items()))
    return made


def certificates(workdir: Path) -> tuple[Path, Path]:
    """(the CA's certificate, the broker's key and certificate) as PEM files, made the first time."""
    ca_path, broker_path = workdir / CA_FILE, workdir / BROKER_PEM
    if ca_path.exists() and broker_path.exists():
        return ca_path, broker_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=365 * _YEARS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sinklab stack CA {workdir.name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _private_dir(ca_path.parent)
    write_private(broker_path, (key_pem + cert.public_bytes(pem) + ca.public_bytes(pem)).decode())
    ca_path.write_bytes(ca.public_bytes(pem))  # public: what every client trusts
    return ca_path, broker_path


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, with no moment where it is readable by others."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)

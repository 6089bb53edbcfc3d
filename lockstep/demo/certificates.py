"""TLS material for Lockstep on loopback: a CA and the operator's serving certificate for 127.0.0.1 (and this
machine's address, which operator replicas advertise), as cert-manager or the chart's bootstrap would issue
them in a cluster. The demo and the tests use it."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Certificates", "host_address", "loopback_server_names", "make_certificates"]


@dataclass(frozen=True)
class Certificates:
    ca_pem: str
    cert_file: Path
    key_file: Path


def loopback_server_names() -> list[x509.GeneralName]:
    """The names of an operator's serving certificate on this machine: loopback, and the machine's address
    that replicas advertise (a replica verifies its peer by that address)."""
    names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    with contextlib.suppress(RuntimeError):
        names.append(x509.IPAddress(ipaddress.ip_address(host_address())))
    return names


def host_address() -> str:
    """This machine's first global unicast IPv4 address, for operator replicas that advertise themselves:
    the sidecar refuses a reportTo on loopback (lockstep.core.wire.replica_host), as it would in a pod,
    so replicas on one machine bind every address and advertise this one."""
    try:
        links = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "scope", "global"], check=True,
                                          capture_output=True, text=True).stdout)
    except (OSError, subprocess.CalledProcessError, ValueError) as error:
        raise RuntimeError(f"cannot list this machine's addresses with `ip` (iproute2): {error}") from error
    for link in links:
        for info in link.get("addr_info") or []:
            address = ipaddress.ip_address(info.get("local", "0.0.0.0"))
            if not (address.is_loopback or address.is_link_local or address.is_unspecified):
                return str(address)
    raise RuntimeError("operator replicas need a non-loopback IPv4 address on this machine (ip -4 addr)")


def make_certificates(folder: Path) -> Certificates:
    """A CA and a server certificate for 127.0.0.1, signed by it, written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lockstep test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lockstep-operator")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(loopback_server_names()), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return Certificates(ca.public_bytes(serialization.Encoding.PEM).decode(), cert_file, key_file)

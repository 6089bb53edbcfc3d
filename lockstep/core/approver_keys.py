"""Approver keys: Ed25519 or ECDSA P-256 key pairs in PEM (PKCS #8 private, SubjectPublicKeyInfo public), and
the signer of a private key (keys held in a KMS or an HSM sign through securesystemslib's signers by URI,
which the command line hands over to)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from securesystemslib.signer import CryptoSigner

from lockstep.core.errors import LockstepError

__all__ = ["ApproverKeyError", "KeyKind", "KeyPair", "generate_key", "signer_of_pem"]


class ApproverKeyError(LockstepError, ValueError):
    """A private key that cannot sign."""


class KeyKind(str, enum.Enum):
    ED25519 = "ed25519"
    ECDSA_P256 = "ecdsa-p256"


@dataclass(frozen=True)
class KeyPair:
    private_pem: bytes
    public_pem: bytes

    @property
    def keyid(self) -> str:
        return signer_of_pem(self.private_pem).public_key.keyid


def generate_key(kind: KeyKind = KeyKind.ED25519) -> KeyPair:
    private = ed25519.Ed25519PrivateKey.generate() if kind is KeyKind.ED25519 else ec.generate_private_key(ec.SECP256R1())
    return KeyPair(
        private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()),
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def signer_of_pem(private_pem: bytes) -> CryptoSigner:
    try:
        private = serialization.load_pem_private_key(private_pem, password=None)
    except (ValueError, TypeError) as error:
        raise ApproverKeyError(f"not an unencrypted PEM private key: {error}") from None
    if not isinstance(private, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ApproverKeyError("an approver key is Ed25519 or ECDSA P-256")
    if isinstance(private, ec.EllipticCurvePrivateKey) and not isinstance(private.curve, ec.SECP256R1):
        raise ApproverKeyError(f"an ECDSA approver key is on P-256, not {private.curve.name}")
    return CryptoSigner(private)

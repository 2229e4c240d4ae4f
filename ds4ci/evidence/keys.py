"""Runner keys: an Ed25519 key pair per runner, made by ``ds4ci runner-key init`` (the ``cryptography`` package).

The private key is a PKCS#8 PEM file, mode 0600, by default in the user's config folder
(``$XDG_CONFIG_HOME/ds4ci/runner-key.pem``, else ``~/.config/ds4ci/runner-key.pem``), which the
sandbox never shows to PR code. The public key travels as one line, ``ed25519:<base64 of the 32
raw bytes>``, into the trusted config (``[runners.<name>] public_key``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ds4ci.errors import UsageError
from ds4ci.options.values import PUBLIC_KEY_PREFIX, public_key_line

KEY_FILE = "runner-key.pem"


def default_folder() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ds4ci"


def default_path() -> Path:
    return default_folder() / KEY_FILE


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_line(public: Ed25519PublicKey) -> str:
    return PUBLIC_KEY_PREFIX + base64.b64encode(_raw(public)).decode("ascii")


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(_raw(public)).hexdigest()


def create(path: Path) -> str:
    """Write a new private key at ``path`` (mode 0600; never over an existing file); return the public line."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(
            f"{path} already exists; a runner key is never overwritten (to rotate it, make the new one with "
            "--path elsewhere, add its public key to the trusted config, then switch --signing-key)"
        ) from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    return public_line(private.public_key())


def load_private(path: Path) -> Ed25519PrivateKey:
    """The private key at ``path``; UsageError says what is wrong (missing, not Ed25519, readable by others)."""
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"cannot read the signing key {path}: {exc.strerror or exc}") from exc
    if mode & 0o077:
        raise UsageError(f"signing key {path} is readable by other users (mode {mode & 0o777:o}); chmod 600 {path}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{path} is not an Ed25519 key (make one with `ds4ci runner-key init`)")
    return key


def load_public(line: str) -> Ed25519PublicKey:
    checked = public_key_line(line, "public key")
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(checked[len(PUBLIC_KEY_PREFIX):]))


def verifies(line: str, signature: bytes, message: bytes) -> bool:
    """Does ``signature`` over ``message`` verify with the public key ``line``?"""
    try:
        load_public(line).verify(signature, message)
    except (InvalidSignature, UsageError, ValueError, binascii.Error):
        return False
    return True

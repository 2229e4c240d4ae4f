"""Signed evidence: ``attestation.json``, an in-toto Statement v1 in a DSSE envelope, signed by the runner key.

Written by the gate after sealing, next to ``manifest.json`` and ``results.json`` (outside the
manifest, like ``results.json``). The statement's subject is the manifest's SHA-256, so it covers
every sealed file; its predicate repeats what a reader must not be able to change: the head and
base commits, the runner, the digest of the recorded settings, the ds4ci version, the verdict and
(from schema 3) the evidence schema version.

``check`` is the one function ``verify`` and ``publish`` call: with the runner's trusted public
key, a bundle edited and re-sealed by anyone without the private key does not pass.

Formats (DSSE protocol 1.0; in-toto Attestation Framework, Statement v1)::

    {"payloadType": "application/vnd.in-toto+json", "payload": base64(statement),
     "signatures": [{"keyid": sha256(raw public key), "sig": base64(Ed25519(PAE(payloadType, payload)))}]}
    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body   (LEN: decimal byte length)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci import __version__
from ds4ci.evidence import keys, store
from ds4ci.fileio import write_text_atomic
from ds4ci.judging import strictjson
from ds4ci.options.values import public_keys, read_toml

ATTESTATION = store.ATTESTATION
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://ds4ci.invalid/attestation/gate/v1"  # unresolvable by design (DSSE allows it)
_MAX_BYTES = store.MAX_ATTESTATION_BYTES


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a signature covers (the payload type included)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def settings_digest(doc: dict[str, Any]) -> str:
    """SHA-256 of the recorded settings (canonical JSON): the configuration the run used."""
    text = json.dumps(doc.get("settings"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def predicate(doc: dict[str, Any]) -> dict[str, Any]:
    """What the attestation vouches for, taken from a bundle's results.json."""
    revisions = doc.get("revisions") or {}
    head, base = revisions.get("head") or {}, revisions.get("base") or {}
    found = {
        "head": head.get("sha"), "base": base.get("sha"), "runner": (doc.get("runner") or {}).get("name"),
        "config_sha256": settings_digest(doc), "ds4ci_version": doc.get("ds4ci_version"), "verdict": doc.get("verdict"),
    }
    if "schema_version" in doc:  # recorded since schema 3: the statements of older evidence do not name it
        found["schema_version"] = doc["schema_version"]
    return found


def _bundle(directory: Path) -> tuple[str, dict[str, Any]]:
    """The manifest's SHA-256 and the parsed results.json of a sealed attempt."""
    manifest = hashlib.sha256((directory / "manifest.json").read_bytes()).hexdigest()
    doc = strictjson.loads((directory / "results.json").read_bytes(), "results.json")
    if not isinstance(doc, dict):
        raise ValueError("results.json is not a JSON object")
    return manifest, doc


def statement(manifest_sha256: str, doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "manifest.json", "digest": {"sha256": manifest_sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {**predicate(doc), "signer": f"ds4ci {__version__}"},
    }


def sign(directory: Path, key_path: Path) -> Path:
    """Write ``attestation.json`` into a sealed attempt directory, signed with the private key at ``key_path``."""
    manifest, doc = _bundle(directory)
    return sign_statement(directory, key_path, statement(manifest, doc))


def sign_statement(directory: Path, key_path: Path, body: dict[str, Any]) -> Path:
    """Write ``attestation.json`` into ``directory``: ``body`` (an in-toto statement) signed with the key at ``key_path``."""
    private = keys.load_private(key_path)
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    signature = private.sign(pae(PAYLOAD_TYPE, payload))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": keys.key_id(private.public_key()), "sig": base64.b64encode(signature).decode("ascii")}],
    }
    out = directory / ATTESTATION
    write_text_atomic(out, json.dumps(envelope, indent=2, sort_keys=True) + "\n")
    return out


def _envelope(directory: Path) -> tuple[bytes, list[bytes]]:
    """The payload and the signatures of attestation.json; ValueError says what is malformed."""
    path = directory / ATTESTATION
    if path.is_symlink() or not path.is_file():
        raise FileNotFoundError(ATTESTATION)
    if path.stat().st_size > _MAX_BYTES:
        raise ValueError(f"{ATTESTATION} is larger than {_MAX_BYTES} bytes")
    envelope = strictjson.loads(path.read_bytes(), ATTESTATION)
    if not isinstance(envelope, dict) or envelope.get("payloadType") != PAYLOAD_TYPE:
        raise ValueError(f"{ATTESTATION} is not a DSSE envelope with payloadType {PAYLOAD_TYPE}")
    sigs = envelope.get("signatures")
    if not isinstance(sigs, list) or not sigs or not all(isinstance(s, dict) and isinstance(s.get("sig"), str) for s in sigs):
        raise ValueError(f"{ATTESTATION} has no signatures")
    try:
        payload = base64.b64decode(str(envelope.get("payload")), validate=True)
        return payload, [base64.b64decode(s["sig"], validate=True) for s in sigs]
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{ATTESTATION}: payload or signature is not base64") from exc


def signed_payload(directory: Path, public_keys: Sequence[str], who: str) -> tuple[bytes | None, list[str]]:
    """The payload of ``attestation.json`` when one of ``public_keys`` signed it, else the problems."""
    try:
        payload, signatures = _envelope(directory)
    except FileNotFoundError:
        return None, [f"not signed by {who}: the bundle has no {ATTESTATION}"]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, [f"not signed by {who}: {exc}"]
    signed = pae(PAYLOAD_TYPE, payload)
    if not any(keys.verifies(line, sig, signed) for line in public_keys for sig in signatures):
        return None, [f"not signed by {who}: no signature in {ATTESTATION} verifies with the configured public key"]
    return payload, []


def disagreements(claimed: Any, expected: dict[str, Any], who: str) -> list[str]:
    """How a signed statement differs from the one the folder's files make (the signer's version aside)."""
    if not isinstance(claimed, dict) or not isinstance(claimed.get("predicate"), dict):
        return [f"signed by {who}, but the statement is malformed"]
    claimed["predicate"].pop("signer", None)
    expected["predicate"].pop("signer", None)
    return [
        f"signed by {who}, but the attestation's {name} disagrees with the bundle "
        f"(signed {claimed.get(name)!r}, bundle {expected[name]!r})"
        for name in ("_type", "subject", "predicateType", "predicate") if claimed.get(name) != expected[name]
    ]


def check(directory: Path, public_keys: Sequence[str], runner: str) -> list[str]:
    """Problems with a bundle's signature ([] when a trusted key signed a statement that matches the bundle).

    ``public_keys``: the ``ed25519:...`` lines trusted for ``runner`` (one during a key rotation: two).
    """
    who = f"runner {runner}'s key"
    payload, problems = signed_payload(directory, public_keys, who)
    if payload is None:
        return problems
    try:
        claimed = strictjson.loads(payload, "the signed statement")
        manifest, doc = _bundle(directory)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [f"signed by {who}, but the bundle cannot be read: {exc}"]
    return disagreements(claimed, statement(manifest, doc), who)


ANY_RUNNER = "*"  # keys given on the command line (--key): trusted for whichever runner the bundle names


def trusted_keys(config_file: Path) -> dict[str, tuple[str, ...]]:
    """The public keys a trusted ds4ci.toml names: ``[runners.<name>] public_key`` and ``[runner] public_key``."""
    doc = read_toml(config_file)
    found: dict[str, tuple[str, ...]] = {}
    runners = doc.get("runners", {})
    for name, table in (runners.items() if isinstance(runners, dict) else ()):
        if isinstance(table, dict) and "public_key" in table:
            found[name] = public_keys(table["public_key"], f"runners.{name}.public_key")
    runner = doc.get("runner", {})
    if isinstance(runner, dict) and "public_key" in runner:
        name = runner.get("name", ANY_RUNNER)
        found.setdefault(str(name), public_keys(runner["public_key"], "runner.public_key"))
    return found


def bundle_problems(root: Path, runner: str | None, trusted: dict[str, tuple[str, ...]]) -> list[str]:
    """The signature problems of an opened bundle under ``trusted`` keys ({}: no key configured, nothing checked)."""
    if not trusted:
        return []
    name = runner or "?"
    lines = trusted.get(ANY_RUNNER, ()) + trusted.get(name, ())
    if not lines:
        return [f"not signed by a trusted key: the trusted config names runner keys, but none for runner {name}"]
    return check(root, lines, name)

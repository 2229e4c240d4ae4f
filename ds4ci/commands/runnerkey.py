"""``ds4ci runner-key init``: make the runner's Ed25519 key pair and print the public key line."""

from __future__ import annotations

from pathlib import Path

from ds4ci.errors import EXIT_PASS
from ds4ci.evidence import keys


def run_runner_key_init(path: Path | None) -> int:
    target = path if path is not None else keys.default_path()
    line = keys.create(target)
    print(f"private key: {target} (mode 0600; keep it where only the gate's user can read it)")
    print("add to the trusted ds4ci.toml, under this runner's [runners.<name>] table:")
    print(f'public_key = "{line}"')
    return EXIT_PASS

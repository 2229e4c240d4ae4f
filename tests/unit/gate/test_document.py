"""The gate's inputs: a prompt is sent only as the bytes whose SHA-256 was verified."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ds4ci.errors import NoVerdictError
from ds4ci.gate.document import read_verified_prompt


def test_a_prompt_is_sent_only_as_the_bytes_that_were_verified(tmp_path: Path) -> None:
    prompt = tmp_path / "p.txt"
    prompt.write_text("verified text\n")
    digest = hashlib.sha256(b"verified text\n").hexdigest()
    assert read_verified_prompt(prompt, digest) == "verified text\n"
    prompt.write_text("swapped after hashing\n")
    with pytest.raises(NoVerdictError, match="changed after its SHA-256 was verified"):
        read_verified_prompt(prompt, digest)
    prompt.write_bytes(b"\xff\xfe")
    with pytest.raises(NoVerdictError, match="not UTF-8"):
        read_verified_prompt(prompt, hashlib.sha256(b"\xff\xfe").hexdigest())

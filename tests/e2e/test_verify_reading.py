"""`ds4ci verify` reads a bundle that cannot steer it, and says plainly what each exit code means.

Real bundles from real gate runs against the simulator; every check goes through the real CLI.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace
from test_verify import reseal


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A passing bundle (directory and archive), and an intact one whose verdict is error."""
    root = tmp_path_factory.mktemp("reading")
    ws = Workspace.create(root)
    good = ws.gate(widths="2", bundle_out=root / "pass.tar.gz")
    assert good.code == 0 and good.results is not None, good.stderr
    broken = ws.gate(faults="http-error", widths="2")
    assert broken.code == 3 and broken.results is not None, broken.stderr
    return {
        "pass": Path(good.results["evidence"]["dir"]), "pass.tar.gz": root / "pass.tar.gz",
        "error": Path(broken.results["evidence"]["dir"]), "results.json": Path(good.results["evidence"]["dir"]) / "results.json",
    }


def verify(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, "verify", *map(str, args)], capture_output=True, text=True, timeout=120, check=False,
                          env=env)


def copied(made: dict[str, Path], tmp_path: Path, which: str = "pass") -> Path:
    return Path(shutil.copytree(made[which], tmp_path / which, symlinks=True))


def first_request(bundle: Path) -> tuple[Path, dict[str, object]]:
    path = bundle / "servers" / "q2" / "lifecycle.json"
    return path, json.loads(path.read_text())


def test_exit_codes_are_distinct_for_pass_no_verdict_and_tampering(made: dict[str, Path], tmp_path: Path) -> None:
    assert verify(made["pass"]).returncode == 0
    error = verify(made["error"])
    assert error.returncode == 4, error.stdout + error.stderr
    assert "intact and consistent; recomputed verdict error" in error.stdout
    (doc,) = json.loads(verify(made["error"], "--json").stdout)
    assert (doc["verifies"], doc["verdict"], doc["exit_code"]) == (True, "error", 4)
    tampered = copied(made, tmp_path, "error")
    (tampered / "attempt.json").write_text("{}")
    proc = verify(tampered)
    assert proc.returncode == 3 and "evidence does not verify" in proc.stdout
    assert verify(made["pass"], made["error"]).returncode == 4  # the most severe wins
    assert verify(made["error"], tampered).returncode == 3


def test_help_documents_every_exit_code() -> None:
    text = subprocess.run([DS4CI, "verify", "--help"], capture_output=True, text=True, check=True).stdout
    for code in ("0:", "1:", "2:", "3:", "4:"):
        assert code in text


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    proc = verify(tmp_path / "nowhere")
    assert proc.returncode == 2 and "does not exist" in proc.stderr + proc.stdout


def test_a_results_json_is_named_as_such(made: dict[str, Path], tmp_path: Path) -> None:
    proc = verify(made["results.json"])
    assert proc.returncode == 3
    assert "a results.json?), not an evidence bundle" in proc.stdout and "--bundle-out" in proc.stdout
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    proc = verify(other)
    assert proc.returncode == 3 and "not an evidence bundle (neither a directory nor a .tar.gz)" in proc.stdout


@pytest.mark.parametrize("path", ["/etc/hostname", "../../../../../../etc/hostname", "requests//q2/x.json", "servers"])
def test_a_resealed_request_path_cannot_leave_the_bundle(made: dict[str, Path], tmp_path: Path, path: str) -> None:
    bundle = copied(made, tmp_path)
    where, life = first_request(bundle)
    life["requests"][0]["request"] = path  # type: ignore[index]
    where.write_text(json.dumps(life))
    reseal(bundle)
    proc = verify(bundle)
    assert proc.returncode == 3, proc.stdout
    # Refused by whichever defence reads it first: the gate's own path for each request, or confined reading.
    assert any(why in proc.stdout for why in ("plain relative path", "not a regular file (a directory",
                                                "(interleaved order)")), proc.stdout


def test_a_request_path_through_a_planted_symlink_is_not_followed(made: dict[str, Path], tmp_path: Path) -> None:
    bundle = copied(made, tmp_path)
    (bundle / "requests" / "host.json").symlink_to("/etc/hostname")
    where, life = first_request(bundle)
    life["requests"][0]["request"] = "requests/host.json"  # type: ignore[index]
    where.write_text(json.dumps(life))
    reseal(bundle)
    proc = verify(bundle)
    assert proc.returncode == 3 and "symbolic link" in proc.stdout


def test_a_fifo_in_place_of_a_request_does_not_hang(made: dict[str, Path], tmp_path: Path) -> None:
    bundle = copied(made, tmp_path)
    _, life = first_request(bundle)
    request = bundle / str(life["requests"][0]["request"])  # type: ignore[index]
    request.unlink()
    os.mkfifo(request)
    proc = verify(bundle)  # the 120 s timeout in verify() would raise if it hung
    assert proc.returncode == 3 and "not a regular file" in proc.stdout


@pytest.mark.parametrize("text", ["[]", "\"manifest\"", "{\"schema\": \"ds4ci/manifest/v1\", \"evidence\": [1, null, {}]}",
                                  "{\"schema\": \"ds4ci/manifest/v1\", \"evidence\": {}}", "null"])
def test_a_malformed_manifest_is_a_message_not_an_internal_error(made: dict[str, Path], tmp_path: Path, text: str) -> None:
    bundle = copied(made, tmp_path)
    (bundle / "manifest.json").write_text(text)
    proc = verify(bundle)
    assert proc.returncode == 3 and "evidence does not verify: manifest" in proc.stdout, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr


def test_bundle_archives_put_the_manifest_first(made: dict[str, Path]) -> None:
    with tarfile.open(made["pass.tar.gz"]) as tar:
        first = tar.next()
    assert first is not None and first.name.endswith("/manifest.json")


def _archive(out: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"attempt/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _manifest(**sizes: int) -> bytes:
    evidence = [{"path": p.replace("__", "/"), "size": s, "sha256": "0" * 64} for p, s in sizes.items()]
    return json.dumps({"schema": "ds4ci/manifest/v1", "evidence": evidence}).encode()


def test_an_archive_member_larger_than_its_manifest_entry_is_refused_before_extraction(tmp_path: Path) -> None:
    bomb = _archive(tmp_path / "bomb.tar.gz", {"manifest.json": _manifest(big__log=10), "big/log": bytes(64 << 20)})
    assert bomb.stat().st_size < 1 << 20
    scratch = tmp_path / "tmp"  # its own TMPDIR: another test's verify (another xdist worker) leaves no folder here
    scratch.mkdir()
    proc = verify(bomb, env={**os.environ, "TMPDIR": str(scratch)})
    assert proc.returncode == 3 and "more than the 10 its manifest lists (refused before extraction)" in proc.stdout
    assert list(scratch.iterdir()) == []  # nothing left behind


@pytest.mark.parametrize(("members", "expected"), [
    ({"manifest.json": _manifest(a=1), "b": b"x"}, "'b' is not listed in the archive's manifest.json"),
    ({"a": bytes(1 << 20), "manifest.json": _manifest(a=1)}, "first file is 'a', not manifest.json"),
    ({"manifest.json": b"[]"}, "is not a manifest"),
    ({"a": b"x"}, "first file is 'a', not manifest.json"),
    ({}, "holds no manifest.json"),
    ({"manifest.json": _manifest(a=1), "a": b"x", "../../escape": b"x"}, "unsafe path"),
])
def test_archive_members_are_held_to_the_manifest(tmp_path: Path, members: dict[str, bytes], expected: str) -> None:
    proc = verify(_archive(tmp_path / "bad.tar.gz", members))
    assert proc.returncode == 3 and expected in proc.stdout, proc.stdout


def test_a_second_top_directory_and_a_repeated_member_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "two.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("attempt/manifest.json", "other/x", "attempt/manifest.json"):
            data = _manifest(x=1)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    proc = verify(archive)
    assert proc.returncode == 3 and "expected one top directory" in proc.stdout


def test_a_corrupt_deflate_stream_is_a_message(tmp_path: Path) -> None:
    """Found by the fuzzer: an invalid deflate block met while reading a member escaped as zlib.error.

    tarfile wraps zlib errors met while parsing a header, not those met while reading member data
    (here: the manifest, 200 kB, broken half-way, past gzip's 8 kB read-ahead).
    """
    plain = io.BytesIO()
    manifest = _manifest(**{f"f{i:05}": 1 for i in range(3000)})
    with tarfile.open(fileobj=plain, mode="w") as tar:
        info = tarfile.TarInfo("attempt/manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(plain.getvalue()[: len(manifest) // 2]) + deflate.flush(zlib.Z_SYNC_FLUSH)
    broken = tmp_path / "broken.tar.gz"  # 0x07 opens a block of type 3, which does not exist
    broken.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + b"\x07" + bytes(64))
    proc = verify(broken)
    assert proc.returncode == 3 and "is not a readable .tar.gz" in proc.stdout, proc.stdout + proc.stderr


def test_the_extraction_budget_is_ds4cis_never_the_manifests(tmp_path: Path) -> None:
    """The attack: a manifest that lists a 1 GiB log makes a few MB of .tar.gz write 1 GiB. The budget refuses the
    member from its header, before one byte of it is decompressed (here the archive ends right after that header)."""
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        manifest = _manifest(big__log=1 << 30)
        info = tarfile.TarInfo("attempt/manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        big = tarfile.TarInfo("attempt/big/log")
        big.size = 1 << 30
        tar.addfile(big)  # the header only
    archive = tmp_path / "declared.tar.gz"
    archive.write_bytes(gzip.compress(plain.getvalue()))
    proc = verify(archive)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert (f"the archive's files pass ds4ci's extraction budget of {512 << 20} bytes at member 'big/log' "
            f"({1 << 30} bytes, ") in proc.stdout, proc.stdout


def test_max_extract_mib_sets_the_budget_and_the_message_names_it(tmp_path: Path) -> None:
    data = bytes(2 << 20)
    honest = _archive(tmp_path / "honest.tar.gz", {"manifest.json": _manifest(big__log=len(data)), "big/log": data})
    scratch = tmp_path / "tmp"  # its own TMPDIR: another test's verify (another xdist worker) leaves no folder here
    scratch.mkdir()
    proc = verify("--max-extract-mib", "1", honest, env={**os.environ, "TMPDIR": str(scratch)})
    assert proc.returncode == 3 and f"ds4ci's extraction budget of {1 << 20} bytes at member 'big/log'" in proc.stdout
    assert list(scratch.iterdir()) == []  # the partial extraction is removed
    assert verify("--max-extract-mib", "0", honest).returncode == 2

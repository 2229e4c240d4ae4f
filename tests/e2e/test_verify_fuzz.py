"""Fuzzing ``ds4ci verify`` over mutations of real bundles (hypothesis).

The bundles come from real gate runs against the simulator (a pass and a fail, each as a directory
and as the gate's ``--bundle-out`` archive), made once per module. Every example mutates a copy:
bytes flipped or cut, a JSON value replaced by another type or by a path that points outside the
bundle (then, half the time, the manifest and the results digest are recomputed as a forger would,
so the malformed value reaches the judge), a file replaced by a symlink, a FIFO or a directory, and
for archives the tar headers themselves (sizes, types, names, links) or the raw tar and gzip bytes.

The property: ``verify`` (the CLI's own ``run_verify``, in process) returns 0, 1 or 3 and prints a
message; no exception escapes; no file outside the bundle is opened (an audit hook on ``open``
watches for a sentinel file planted next to the bundle, by name and by resolved path); and every
case finishes within hypothesis' deadline. A sealed file whose bytes changed without a reseal is
always exit 3. Figures and the command: docs/fuzzing.md.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from gatekit import Workspace
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ds4ci.commands.verify import run_verify

EXAMPLES = int(os.environ.get("DS4CI_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=10),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
SENTINEL_NAME = "SENTINEL-outside-the-bundle.json"
_watch: dict[str, Any] = {"on": False, "sentinel": "", "opened": []}


def _audit(event_name: str, args: tuple[Any, ...]) -> None:
    if event_name != "open" or not _watch["on"] or not isinstance(args[0], (str, bytes)):
        return
    path = os.fsdecode(args[0])
    if SENTINEL_NAME in path or (os.path.isabs(path) and os.path.realpath(path) == _watch["sentinel"]):
        _watch["opened"].append(path)


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    ws = Workspace.create(root)
    good = ws.gate(widths="2", bundle_out=root / "pass.tar.gz")
    bad = ws.gate(faults="leak-fused-verify@q2", widths="2", bundle_out=root / "fail.tar.gz")
    assert good.code == 0 and bad.code == 1 and good.results and bad.results, good.stderr + bad.stderr
    sentinel = root / "outside" / SENTINEL_NAME
    sentinel.parent.mkdir()
    sentinel.write_text(json.dumps({"messages": [{"role": "user", "content": "secret"}]}))
    _watch["sentinel"] = os.path.realpath(sentinel)
    return {"pass": Path(good.results["evidence"]["dir"]), "fail": Path(bad.results["evidence"]["dir"]),
            "pass.tar.gz": root / "pass.tar.gz", "fail.tar.gz": root / "fail.tar.gz", "sentinel": sentinel}


class Hung(Exception):
    """verify blocked (a FIFO opened for reading waits for a writer for ever)."""


def _hung(signum: int, frame: object) -> None:
    raise Hung("verify blocked for 60 s: something waited for ever (a FIFO?)")


def check(path: Path, changed_sealed_file: bool = False) -> int:
    """The property every outcome must have; the exit code."""
    out = io.StringIO()
    _watch["on"], _watch["opened"] = True, []
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(60)  # a blocked open() never returns, so hypothesis' deadline alone would wait with it
    try:
        with contextlib.redirect_stdout(out):
            code = run_verify([path], as_json=False, expect_config=None)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        _watch["on"] = False
    assert not _watch["opened"], f"opened outside the bundle: {_watch['opened']}"
    assert code in (0, 1, 3), out.getvalue()
    assert str(path) in out.getvalue()
    if changed_sealed_file:
        assert code == 3, out.getvalue()
    event(f"exit {code}")
    return code


def outside_paths(sentinel: Path) -> st.SearchStrategy[str]:
    return st.sampled_from([str(sentinel), "../" * 6 + str(sentinel).lstrip("/"), f"../outside/{SENTINEL_NAME}",
                            f"../../../outside/{SENTINEL_NAME}", "servers", "requests//x", "./attempt.json", ""])


def json_values(sentinel: Path) -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                       st.floats(allow_nan=False), st.text(max_size=20), outside_paths(sentinel))
    return st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=6)


def _slots(doc: Any, trail: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON document (the root excluded) as a key/index trail."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    out: list[tuple[Any, ...]] = []
    for key, value in items:
        out.append((*trail, key))
        out += _slots(value, (*trail, key))
    return out


def reseal(bundle: Path) -> None:
    """Recompute the manifest and the results digest over the (mutated) files, as a forger would."""
    if not ((bundle / "manifest.json").is_file() and (bundle / "results.json").is_file()):
        return  # a FIFO in their place would block this forger's own read
    with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError, OSError):
        manifest = json.loads((bundle / "manifest.json").read_text())
        for entry in manifest["evidence"]:
            if not (bundle / entry["path"]).is_file():  # a FIFO would block this forger's own read
                continue
            data = (bundle / entry["path"]).read_bytes()
            entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        results = json.loads((bundle / "results.json").read_text())
        results["evidence"]["manifest_sha256"] = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
        (bundle / "results.json").write_text(json.dumps(results))


@contextlib.contextmanager
def copy_of(source: Path) -> Any:
    scratch = Path(tempfile.mkdtemp(prefix="ds4ci-fuzz-"))
    try:
        if source.is_dir():
            yield Path(shutil.copytree(source, scratch / source.name, symlinks=True))
        else:
            yield Path(shutil.copy(source, scratch / source.name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def sealed(bundle: Path) -> list[str]:
    return sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())


@FUZZ
@given(data=st.data(), which=st.sampled_from(["pass", "fail"]))
def test_json_values_of_real_bundles(real: dict[str, Path], data: st.DataObject, which: str) -> None:
    with copy_of(real[which]) as bundle:
        name = data.draw(st.sampled_from([f for f in sealed(bundle) if f.endswith(".json")]), label="file")
        doc = json.loads((bundle / name).read_text())
        slots = _slots(doc)
        if slots:
            trail = data.draw(st.sampled_from(slots), label="slot")
            holder = doc
            for key in trail[:-1]:
                holder = holder[key]
            holder[trail[-1]] = data.draw(json_values(real["sentinel"]), label="value")
        else:
            doc = data.draw(json_values(real["sentinel"]), label="document")
        (bundle / name).write_text(json.dumps(doc))
        forged = data.draw(st.booleans(), label="reseal")
        if forged:
            reseal(bundle)
        check(bundle, changed_sealed_file=not forged and name != "results.json" and doc != json.loads(
            (real[which] / name).read_text()))


@FUZZ
@given(data=st.data(), which=st.sampled_from(["pass", "fail"]),
       how=st.sampled_from(["flip", "truncate", "symlink", "fifo", "directory"]))
def test_file_bytes_and_types_of_real_bundles(real: dict[str, Path], data: st.DataObject, which: str, how: str) -> None:
    with copy_of(real[which]) as bundle:
        name = data.draw(st.sampled_from(sealed(bundle)), label="file")
        path = bundle / name
        raw = bytearray(path.read_bytes())
        if how == "flip":
            for _ in range(data.draw(st.integers(1, 3), label="flips") if raw else 0):
                raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
            path.write_bytes(bytes(raw))
        elif how == "truncate":
            path.write_bytes(bytes(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)))]))
        else:
            path.unlink()
            {"symlink": lambda: path.symlink_to(real["sentinel"]), "fifo": lambda: os.mkfifo(path),
             "directory": path.mkdir}[how]()
        changed = how in ("symlink", "fifo", "directory") or path.read_bytes() != real[which].joinpath(name).read_bytes()
        forged = data.draw(st.booleans(), label="reseal")
        if forged:
            reseal(bundle)
        check(bundle, changed_sealed_file=changed and not forged and name != "results.json")


def _members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(archive) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def _mutate_member(data: st.DataObject, info: tarfile.TarInfo, body: bytes, sentinel: Path) -> tuple[tarfile.TarInfo, bytes]:
    what = data.draw(st.sampled_from(["size", "type", "name", "link"]), label="header")
    if what == "size":
        body = body + bytes(data.draw(st.integers(1, 1 << 20), label="extra bytes"))
    elif what == "type":
        info.type = data.draw(st.sampled_from([tarfile.DIRTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE,
                                               tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE]), label="type")
    elif what == "name":
        info.name = data.draw(st.sampled_from([f"/{info.name}", f"../{info.name}", f"other/{info.name}",
                                               info.name.split("/", 1)[0] + "/../x", "x", f"{info.name}/"]), label="name")
    else:
        info.type = data.draw(st.sampled_from([tarfile.SYMTYPE, tarfile.LNKTYPE]), label="link")
        info.linkname = data.draw(outside_paths(sentinel), label="target") or str(sentinel)
    return info, body


@FUZZ
@given(data=st.data(), which=st.sampled_from(["pass.tar.gz", "fail.tar.gz"]),
       how=st.sampled_from(["header", "drop", "duplicate", "tar bytes", "gzip bytes", "truncate"]))
def test_archives_of_real_bundles(real: dict[str, Path], data: st.DataObject, which: str, how: str) -> None:
    members = _members(real[which])
    with copy_of(real[which]) as archive:
        if how in ("gzip bytes", "tar bytes", "truncate"):
            raw = bytearray(archive.read_bytes() if how != "tar bytes" else gzip.decompress(archive.read_bytes()))
            if how == "truncate":
                raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
            else:
                for _ in range(data.draw(st.integers(1, 4), label="flips")):
                    raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
            archive.write_bytes(gzip.compress(bytes(raw)) if how == "tar bytes" else bytes(raw))
        else:
            index = data.draw(st.integers(0, len(members) - 1), label="member")
            if how == "header":
                members[index] = _mutate_member(data, *members[index], real["sentinel"])
            elif how == "drop":
                del members[index]
            else:
                members.insert(index, members[data.draw(st.integers(0, len(members) - 1))])
            with tarfile.open(archive, "w:gz") as tar:
                for info, body in members:
                    info.size = len(body) if info.isreg() else 0
                    tar.addfile(info, io.BytesIO(body) if info.isreg() else None)
        check(archive)

"""results.json is a pure function of the sealed files: every leaf of a real one is bound to its evidence.

Two real gate runs against the simulator, each with a ``[build]`` and ``[[checks]]`` (JUnit, CTest,
exit code) and a git source: a passing bundle and a failing one. Every leaf of each results.json is
changed in turn (a type-appropriate change) and ``verify`` must refuse it (exit 3); a change that
still satisfies the schema must be named by its key path. No field exists that verify does not derive.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gatekit import DS4CI, Workspace, git_repo

from ds4ci.errors import ResultsError
from ds4ci.evidence import derive, results, verify

DATA = Path(__file__).parent.parent / "data" / "checks"


def _config(ws: Workspace, failing: bool) -> Path:
    script = ws.root / "build.sh"
    script.write_text(
        "#!/bin/sh\nset -e\nmkdir -p out\n"
        + "".join(f'echo "[{n}/3] Building CXX object step{n}.o"\n' for n in (1, 2, 3))
        + f"printf '#!/bin/sh\\nexec \"%s\" -m ds4ci.simulator \"$@\"\\n' '{sys.executable}' > out/dflash_server\n"
        + "chmod +x out/dflash_server\n"
    )
    script.chmod(0o755)
    ctest, code = ("ctest-fail.txt", 8) if failing else ("ctest-pass.txt", 0)
    config = ws.root / "ds4ci.toml"
    config.write_text(
        '[build]\ncommand = "./build.sh"\ncwd = "."\ntimeout = 60\nserver_bin = "out/dflash_server"\n'
        f'[[checks]]\nname = "unit"\ncommand = "cp {DATA / "pytest-junit-pass.xml"} junit.xml"\nparser = "junit"\n'
        'report = "junit.xml"\ncwd = "."\n'
        f'[[checks]]\nname = "ctest"\ncommand = "cat {DATA / ctest}; exit {code}"\nparser = "ctest"\n'
        '[[checks]]\nname = "lint"\ncommand = "echo lint clean"\nparser = "exit-code"\n'
    )
    return config


def _bundle(root: Path, failing: bool) -> Path:
    ws = Workspace.create(root, prompts=2)
    repo = root / "src"
    git_repo(repo, {"README": "x\n"})
    run = ws.gate(
        faults="leak-fused-verify@q3" if failing else None, widths="2,3", server_bin=None,
        config=_config(ws, failing), source_dir=repo,
    )
    assert run.code == (1 if failing else 0), run.stderr
    assert run.results is not None
    return Path(run.results["evidence"]["dir"])


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        "pass": _bundle(tmp_path_factory.mktemp("pass"), failing=False),
        "fail": _bundle(tmp_path_factory.mktemp("fail"), failing=True),
    }


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, list[str | int]]]:
    """Every leaf (a scalar, an empty list or object) as (key path as verify names it, key list)."""
    if isinstance(value, dict) and value:
        for key in sorted(value):
            for shown, keys in leaves(value[key], f"{path}.{key}" if path else key):
                yield shown, [key, *keys]
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            for shown, keys in leaves(item, f"{path}[{index}]"):
                yield shown, [index, *keys]
    else:
        yield path, []


def changed(value: Any) -> Any:
    """A type-appropriate change of one leaf."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 0.5
    if isinstance(value, str):
        return value + "x" if value else "x"
    if value is None:
        return "x"
    if isinstance(value, list):
        return ["x"]
    return {"x": "x"}


def _mutated(doc: dict[str, Any], keys: list[str | int]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    parent: Any = out
    for key in keys[:-1]:
        parent = parent[key]
    if keys:
        parent[keys[-1]] = changed(parent[keys[-1]])
    return out


def _schema_valid(doc: dict[str, Any]) -> bool:
    try:
        results.validate(doc)
    except ResultsError:
        return False
    return True


@pytest.mark.parametrize("kind", ["pass", "fail"])
def test_every_leaf_of_results_json_is_derived_from_the_sealed_files(
    bundles: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    bundle = tmp_path / kind
    shutil.copytree(bundles[kind], bundle)
    path = bundle / "results.json"
    original = json.loads(path.read_text())
    assert derive.derive(bundle) == original  # the gate wrote exactly what derive returns
    assert verify.verify_dir(bundle).exit_code == (0 if kind == "pass" else 1)
    assert original["checks"] and original["build"] is not None and original["revisions"] is not None
    walked = list(leaves(original))
    assert len(walked) > 150, walked
    named = 0
    for shown, keys in walked:
        doc = _mutated(original, keys)
        path.write_text(json.dumps(doc))
        found = verify.verify_dir(bundle)
        assert found.exit_code == 3, f"{shown}: a changed value still verifies"
        if _schema_valid(doc):
            assert any(f"{shown}{after}" in p for p in found.problems for after in (" recorded ", "[", ".")), (
                shown, found.problems,
            )
            named += 1
    assert named > len(walked) // 2  # most changes get past the schema and are caught by the derivation
    for key in original:  # a field left out (the schema allows some to be) is a difference too
        path.write_text(json.dumps({k: v for k, v in original.items() if k != key}))
        assert verify.verify_dir(bundle).exit_code == 3, f"{key}: removed, still verifies"
    path.write_text(json.dumps(original))


def _cli(bundle: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, "verify", str(bundle)], capture_output=True, text=True, timeout=120, check=False)


EDITS = {
    "a failing check flipped to pass": (
        "fail", ["checks", 1], {"status": "pass"}, "checks[1].status recorded pass, derived fail",
    ),
    "the head commit replaced (a replay onto another commit)": (
        "pass", ["revisions", "head"], {"sha": "f" * 40}, "revisions.head.sha recorded ffff",
    ),
    "the runner renamed": ("pass", ["runner"], {"name": "other-runner"}, "runner.name recorded other-runner"),
    "the build's summary edited": ("fail", ["build"], {"summary": "built"}, "build.summary recorded built"),
}


@pytest.mark.parametrize("name", EDITS)
def test_edited_fields_are_named_by_the_real_cli(bundles: dict[str, Path], tmp_path: Path, name: str) -> None:
    kind, keys, update, message = EDITS[name]
    bundle = tmp_path / kind
    shutil.copytree(bundles[kind], bundle)
    doc = json.loads((bundle / "results.json").read_text())
    target: Any = doc
    for key in keys:
        target = target[key]
    target.update(update)
    (bundle / "results.json").write_text(json.dumps(doc))
    proc = _cli(bundle)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert message in proc.stdout, proc.stdout


def test_an_answer_that_contradicts_its_trace_fails_the_gate(tmp_path: Path) -> None:
    """The judge reads the HTTP answers: other text for the same IDs, or completion_tokens other than n."""
    ws = Workspace.create(tmp_path)
    run = ws.gate(faults="answer-text-differs@q2,answer-tokens-off@q3", widths="2,3,4")
    assert run.code == 1, run.stderr
    assert run.results is not None
    verdicts = {w["q"]: w["verdict"] for w in run.results["widths"]}
    assert verdicts == {2: "fail", 3: "fail", 4: "pass"}
    reasons = run.reasons()
    assert "q=2 prompt 0 request 1: the server's answer contradicts its own trace (the same token IDs as the " \
           "target-only answer, a different text)" in reasons
    assert "q=3 prompt 0 request 1: the server's answer says completion_tokens=65 but its trace says n=64" in reasons
    assert verify.verify_dir(Path(run.results["evidence"]["dir"])).exit_code == 1

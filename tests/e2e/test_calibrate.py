"""``ds4ci calibrate`` end to end on the CPU: a real git checkout of a tiny C++ engine, built with CMake, whose
binary runs ds4ci's reference server with the tiny models' double; its planted faults are source substitutions
that choose a ``DS4REF_FAULT`` (the catalogue's own names) for the speculative arms. Every gate is the real
``ds4ci gate`` against real server processes; the calibration is run through the CLI as a user runs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gatekit import CLI
from runonce import built_once

from ds4ci.calibrate import cpusets
from ds4ci.supervisor import sandbox
from ds4ci.supervisor.cpuonline import cpu_list

pytest.importorskip("gguf")
pytest.importorskip("torch")

SERVER_CPP = """// A tiny engine: ds4ci's reference server, with a fault planted at compile time.
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

static const char *kFault = "";  // the speculative loop as written

int main(int argc, char **argv) {
  const char *a = std::getenv("DFLASH_DS4_SPEC"), *b = std::getenv("LUCE_DS4_SPEC");
  bool spec = (a && !std::strcmp(a, "1")) || (b && !std::strcmp(b, "1"));
  if (spec && kFault[0]) setenv("DS4REF_FAULT", kFault, 1);
  setenv("DS4REF_THREADS", "1", 1);
  setenv("DS4REF_DTYPE", "bfloat16", 1);
  std::vector<char *> args = {(char *)DS4_PYTHON, (char *)"-m", (char *)"ds4ci.refserver"};
  for (int i = 1; i < argc; i++) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(DS4_PYTHON, args.data());
  return 127;
}
"""
CMAKE = """cmake_minimum_required(VERSION 3.10)
project(tinyengine CXX)
set(PYTHON "" CACHE STRING "the interpreter that runs the reference server")
add_executable(dflash_server src/server.cpp)
target_compile_definitions(dflash_server PRIVATE DS4_PYTHON="${PYTHON}")
"""
# A shell "build" for --engine-config: copies the script; it waits (for the crash tests) while a mutant is applied.
SERVER_SH = """#!/bin/sh
FAULT=""
if [ -n "$FAULT" ] && { [ "${DFLASH_DS4_SPEC:-}" = 1 ] || [ "${LUCE_DS4_SPEC:-}" = 1 ]; }; then export DS4REF_FAULT="$FAULT"; fi
export DS4REF_THREADS=1 DS4REF_DTYPE=bfloat16
exec PYTHON -m ds4ci.refserver "$@"
"""
BUILD_SH = """#!/bin/sh
set -e
mkdir -p out
sed "s#PYTHON#$DS4_PYTHON#" src/server.sh > out/dflash_server.partial
chmod +x out/dflash_server.partial
mv out/dflash_server.partial out/dflash_server
if grep -q 'FAULT="no-rollback"' src/server.sh && [ -n "${HOLD:-}" ]; then
  touch "$HOLD/building"
  i=0; while [ ! -e "$HOLD/release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
fi
"""
CATALOGUE = """engine = "tiny"
repository = "example/tiny-engine"
commits = ["{commit}"]
written = "2026-12-05"

[[mutant]]
name = "no-rollback"
summary = "a rejected draft is never rolled back"
file = "src/{file}"
substitutions = [{{ old = '{old}', new = '{new_rollback}' }}]

[[mutant]]
name = "hc-state-not-restored"
summary = "the hyper-connection state is not restored after a rejection"
file = "src/{file}"
substitutions = [{{ old = '{old}', new = '{new_hc}' }}]
equivalent = "the double keeps no hyper-connection state, so the restore it skips restores nothing"
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _commit_all(repo: Path) -> str:
    if not (repo / ".git").exists():
        _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-qm", "tiny engine")
    return _git(repo, "rev-parse", "HEAD").strip()


def _env(**extra: str) -> dict[str, str]:
    """The gate runs ds4ci's own server, so its sandbox shows this interpreter (for this command only)."""
    env = {k: v for k, v in sandbox.runtime_environment(os.environ).items() if not k.startswith(("DFLASH_", "DS4REF_"))}
    return {**env, "XDG_CONFIG_HOME": extra.pop("XDG_CONFIG_HOME", env.get("XDG_CONFIG_HOME", "")), **extra}


def _catalogue(path: Path, commit: str, file: str, fault_text: str) -> Path:
    text = CATALOGUE.format(commit=commit, file=file, old=fault_text.format(""),
                            new_rollback=fault_text.format("no-rollback"), new_hc=fault_text.format("hc-state-not-restored"))
    path.write_text(text, encoding="utf-8")
    return path


def _calibrate(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [*CLI, "calibrate", *args, "--gate-arg=--target-device", "--gate-arg=cpu:0"]
    return subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=900, check=False,
                          env=env or _env(XDG_CONFIG_HOME=str(tmp / "config")))


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny models, written once per run and shared by the workers (``built_once``): no test writes to them
    (the ones that may get their own copy, ``shell_models``), so this module's tests need not share a worker."""

    def write(out: Path) -> str | None:
        done = subprocess.run([*CLI, "tiny-models", str(out / "m")], capture_output=True, text=True, check=False,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return None

    return built_once(tmp_path_factory, "calibrate-models", write) / "m"


def cmake_engine(tmp: Path, fault: str = "") -> tuple[Path, Path, str]:
    """The tiny C++ engine, committed, and its configured build folder; (source, build, commit)."""
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        pytest.skip("cmake and a C++ compiler are needed for the C++ engine")
    source, build = tmp / "engine", tmp / "build"
    (source / "src").mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(CMAKE, encoding="utf-8")
    (source / "src" / "server.cpp").write_text(SERVER_CPP.replace('kFault = ""', f'kFault = "{fault}"'), encoding="utf-8")
    commit = _commit_all(source)
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), f"-DPYTHON={sys.executable}"], check=True,
                   capture_output=True)
    return source, build, commit


def shell_engine(tmp: Path) -> tuple[Path, Path, str]:
    """The tiny engine as a shell script with a [build] table; (source, engine config, commit)."""
    source = tmp / "engine"
    (source / "src").mkdir(parents=True)
    (source / "src" / "server.sh").write_text(SERVER_SH, encoding="utf-8")
    (source / "build.sh").write_text(BUILD_SH, encoding="utf-8")
    (source / ".gitignore").write_text("out/\n", encoding="utf-8")
    config = source / "ds4ci.toml"
    config.write_text('[build]\ncommand = "sh build.sh"\nserver_bin = "out/dflash_server"\n', encoding="utf-8")
    return source, config, _commit_all(source)


def _tree(source: Path) -> dict[str, str]:
    return {str(p.relative_to(source)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(source.rglob("*")) if p.is_file() and ".git" not in p.parts and "out" not in p.parts}


def test_calibration_catches_the_planted_fault_keeps_the_source_and_the_record_verifies(models: Path, tmp_path: Path) -> None:
    source, build, commit = cmake_engine(tmp_path)
    before = _tree(source)
    key = subprocess.run([*CLI, "runner-key", "init", "--path", str(tmp_path / "config" / "ds4ci" / "runner-key.pem")],
                         capture_output=True, text=True, check=True, timeout=120).stdout.strip().splitlines()[-1].split('"')[1]
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.cpp", 'kFault = "{}"')
    with catalogue.open("a", encoding="utf-8") as fh:  # a mutant that does not compile is reported, never counted
        fh.write('\n[[mutant]]\nname = "typo"\nsummary = "does not compile"\nfile = "src/server.cpp"\n'
                 "substitutions = [{ old = 'return 127;', new = 'return 127' }]\n")
    done = _calibrate(tmp_path, "--build", str(build), "--models", str(models), "--runner", "cpu-calibrated",
                      "--out", str(tmp_path / "out"), "--catalogue", str(catalogue))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _tree(source) == before and _git(source, "status", "--porcelain") == ""
    doc = json.loads((tmp_path / "out" / "record" / "calibration.json").read_text(encoding="utf-8"))
    assert doc["verdict"] == "pass" and doc["engine"]["commit"] == commit and doc["runner"] == "cpu-calibrated"
    assert doc["summary"]["line"] == ("planted faults caught: 1 of 1 at every width where they can act (1 more not "
                                      "judged: not built, or the gate reached no verdict)")
    assert doc["summary"]["unjudged"] == ["typo"] and "exited" in {r["name"]: r for r in doc["mutants"]}["typo"]["why"]
    rows = {r["name"]: r for r in doc["mutants"]}
    assert [(w["q"], w["caught"]) for w in rows["no-rollback"]["widths"]] == [(2, True), (3, True), (4, True)]
    assert all(isinstance(w["first_difference"], int) for w in rows["no-rollback"]["widths"])
    assert not rows["hc-state-not-restored"]["acts"] and not any(w["acts"] for w in rows["hc-state-not-restored"]["widths"])
    assert doc["pins"]["target_sha256"] and doc["catalogue"]["sha256"] == hashlib.sha256(catalogue.read_bytes()).hexdigest()
    assert doc["gpu"]["tool"] in ("unknown", "nvidia-smi", "rocm-smi")
    assert len({doc["control"]["server_bin_sha256"], rows["no-rollback"]["server_bin_sha256"]}) == 2
    assert sorted(p.name for p in (tmp_path / "out" / "gates").iterdir()) == ["control", "hc-state-not-restored", "no-rollback"]

    verified = subprocess.run([*CLI, "verify", str(tmp_path / "out" / "record")], capture_output=True, text=True,
                              check=False, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "calibration record intact and consistent; planted faults caught: 1 of 1 at every" in verified.stdout
    signed = subprocess.run([*CLI, "verify", str(tmp_path / "out" / "record"), "--key", key], capture_output=True,
                            text=True, check=False, timeout=300)
    assert signed.returncode == 0, signed.stdout + signed.stderr  # the runner key signed it (the default key path)
    other = subprocess.run([*CLI, "runner-key", "init", "--path", str(tmp_path / "other.pem")], capture_output=True,
                           text=True, check=True, timeout=120).stdout.strip().splitlines()[-1].split('"')[1]
    unsigned = subprocess.run([*CLI, "verify", str(tmp_path / "out" / "record"), "--key", other], capture_output=True,
                              text=True, check=False, timeout=300)
    assert unsigned.returncode == 3 and "no signature in attestation.json verifies" in unsigned.stdout

    # A report of this runner's gate cites it; another runner's says it was never calibrated.
    bundle = tmp_path / "out" / "gates" / "control" / "bundle.tar.gz"
    cited = subprocess.run([*CLI, "report", str(bundle), "--calibrations", str(tmp_path / "out")], capture_output=True,
                           text=True, check=False, timeout=300)
    assert cited.returncode == 0, cited.stderr
    day = doc["finished"][:10]
    assert (f"planted faults caught: 1 of 1 at every width where they can act (1 more not judged: not built, or the "
            f"gate reached no verdict); calibrated {day} on engine {commit[:7]}") in cited.stdout
    # A gate of this runner on the engine's head: the comment, the job summary and the check run cite it.
    work = tmp_path / "pr-gate"
    work.mkdir()
    gated = subprocess.run([*CLI, "gate", "--config", str(models / "ds4ci.toml"), "--server-bin", str(build / "dflash_server"),
                            "--runner", "cpu-calibrated", "--target-device", "cpu:0", "--source-dir", str(source),
                            "--evidence-dir", str(work / "ev"), "--bundle-out", str(work / "b.tar.gz")], cwd=work,
                           capture_output=True, text=True, check=False, timeout=600, env=_env())
    assert gated.returncode == 0, gated.stderr[-2000:]
    published = subprocess.run([*CLI, "publish", str(work / "b.tar.gz"), "--dry-run", "--repo", "o/r", "--pr", "5",
                                "--calibrations", str(tmp_path / "out"), "--dry-run-dir", str(work / "dry")],
                               cwd=work, capture_output=True, text=True, check=False, timeout=300)
    assert published.returncode == 0, published.stderr[-2000:]
    for name in ("comment.md", "summary.md", "check-run-cpu-calibrated.md"):
        assert f"calibrated {day} on engine {commit[:7]}" in (work / "dry" / name).read_text(encoding="utf-8"), name
    empty = tmp_path / "none"
    empty.mkdir()
    never = subprocess.run([*CLI, "report", str(bundle), "--calibrations", str(empty)], capture_output=True, text=True,
                           check=False, timeout=300)
    assert "runner cpu-calibrated was never calibrated" in never.stdout

    # Tampering with the record's own summary is caught by the re-derivation.
    calibration = tmp_path / "out" / "record" / "calibration.json"
    calibration.write_text(calibration.read_text(encoding="utf-8").replace('"caught": 1', '"caught": 2'), encoding="utf-8")
    tampered = subprocess.run([*CLI, "verify", str(tmp_path / "out" / "record")], capture_output=True, text=True,
                              check=False, timeout=300)
    assert tampered.returncode == 3 and "differs from what its sealed files derive" in tampered.stdout


def test_an_unchanged_build_that_fails_the_gate_fails_the_calibration_with_that_reason(models: Path, tmp_path: Path) -> None:
    source, build, commit = cmake_engine(tmp_path, fault="no-rollback")  # the engine itself has the bug
    catalogue = tmp_path / "c.toml"
    catalogue.write_text(CATALOGUE.split("[[mutant]]", maxsplit=1)[0].format(commit=commit) + (
        '[[mutant]]\nname = "no-rollback"\nsummary = "s"\nfile = "src/server.cpp"\n'
        "substitutions = [{ old = 'kFault = \"no-rollback\"', new = 'kFault = \"\"' }]\n"), encoding="utf-8")
    done = _calibrate(tmp_path, "--build", str(build), "--models", str(models), "--runner", "cpu-broken",
                      "--out", str(tmp_path / "out"), "--catalogue", str(catalogue), "--only", "no-rollback")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "record" / "calibration.json").read_text(encoding="utf-8"))
    assert doc["verdict"] == "fail" and doc["mutants"] == [] and doc["control"]["verdict"] == "fail"
    assert doc["reasons"][0].startswith("the unchanged build did not pass the gate (verdict fail")
    assert "the unchanged build did not pass" in done.stdout
    assert not (tmp_path / "out" / "gates" / "no-rollback").exists()  # nothing else ran
    assert _git(source, "status", "--porcelain") == ""


def _hold(tmp: Path) -> tuple[Path, Path, subprocess.Popen[str], Path]:
    """A calibration with the shell engine, stopped inside the mutant's build (the mutant applied)."""
    source, config, commit = shell_engine(tmp)
    catalogue = _catalogue(tmp / "c.toml", commit, "server.sh", 'FAULT="{}"')
    hold = tmp / "hold"
    hold.mkdir()
    argv = [*CLI, "calibrate", "--engine-config", str(config), "--models", str(tmp / "m"), "--runner", "cpu-held",
            "--out", str(tmp / "out"), "--catalogue", str(catalogue), "--only", "no-rollback",
            "--gate-arg=--target-device", "--gate-arg=cpu:0"]
    env = _env(XDG_CONFIG_HOME=str(tmp / "config"), DS4_PYTHON=sys.executable, HOLD=str(hold))
    proc = subprocess.Popen(argv, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    while not (hold / "building").exists():  # the unchanged build is gated first; then the mutant is applied
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    return source, hold, proc, catalogue


@pytest.fixture
def shell_models(models: Path, tmp_path: Path) -> Path:
    shutil.copytree(models, tmp_path / "m")
    return tmp_path / "m"


def test_sigterm_puts_the_source_back_and_a_crash_leaves_a_record_that_restore_uses(shell_models: Path,
                                                                                     tmp_path: Path) -> None:
    source, hold, proc, catalogue = _hold(tmp_path)
    original = SERVER_SH.encode("utf-8")  # as committed
    assert b'FAULT="no-rollback"' in (source / "src" / "server.sh").read_bytes()  # held mid-build, mutant applied
    proc.kill()  # a crash: nothing can restore
    proc.communicate()
    (hold / "release").touch()  # the orphaned build script ends
    assert _git(source, "status", "--porcelain").strip() == "M src/server.sh"

    again = _calibrate(tmp_path, "--engine-config", str(source / "ds4ci.toml"), "--models", str(shell_models),
                       "--runner", "cpu-held", "--out", str(tmp_path / "out2"), "--catalogue", str(catalogue))
    assert again.returncode == 2 and "expected an unmodified engine checkout" in again.stderr, again.stderr
    assert "src/server.sh" in again.stderr and "Traceback" not in again.stderr
    restored = _calibrate(tmp_path, "--engine-config", str(source / "ds4ci.toml"), "--out", str(tmp_path / "out"),
                          "--restore")
    assert restored.returncode == 0 and "restored the file mutant no-rollback changed" in restored.stdout
    assert (source / "src" / "server.sh").read_bytes() == original and _git(source, "status", "--porcelain") == ""


def test_sigterm_during_a_mutants_build_restores_the_source_at_once(shell_models: Path, tmp_path: Path) -> None:
    source, hold, proc, _catalogue_path = _hold(tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    (hold / "release").touch()
    assert proc.returncode == 3, out[-3000:]
    assert "restored the file mutant no-rollback changed" in out and "Traceback" not in out
    assert _git(source, "status", "--porcelain") == ""
    assert not (tmp_path / "out" / "applied.json").exists()


def test_refusals_come_before_anything_is_touched(models: Path, tmp_path: Path) -> None:
    source, config, commit = shell_engine(tmp_path)
    (source / "build.sh").write_text("exit 1\n", encoding="utf-8")  # a change the calibration did not make
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.sh", 'FAULT="{}"')
    args = ("--engine-config", str(config), "--models", str(models), "--runner", "r", "--catalogue", str(catalogue))
    dirty = _calibrate(tmp_path, *args, "--out", str(tmp_path / "o1"))
    assert dirty.returncode == 2 and "found changes this calibration did not make: build.sh" in dirty.stderr
    _git(source, "checkout", "--", "build.sh")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(catalogue.read_text(encoding="utf-8").replace("old = 'FAULT=\"\"'", "old = 'NO SUCH TEXT'", 1),
                     encoding="utf-8")
    stale = _calibrate(tmp_path, *args[:-2], "--catalogue", str(wrong), "--out", str(tmp_path / "o2"))
    assert stale.returncode == 2 and "expected 'NO SUCH TEXT' exactly once in src/server.sh, found it 0 times" in stale.stderr
    assert not (tmp_path / "o2").exists() and _git(source, "status", "--porcelain") == ""


def test_an_unchanged_source_that_does_not_build_is_no_calibration(models: Path, tmp_path: Path) -> None:
    source, config, commit = shell_engine(tmp_path)
    config.write_text('[build]\ncommand = "echo broken >&2; exit 4"\nserver_bin = "out/dflash_server"\n', encoding="utf-8")
    _commit_all(source)
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.sh", 'FAULT="{}"')
    done = _calibrate(tmp_path, "--engine-config", str(config), "--models", str(models), "--runner", "r",
                      "--catalogue", str(catalogue), "--out", str(tmp_path / "out"))
    assert done.returncode == 3 and "`echo broken >&2; exit 4` exited 4" in done.stderr, done.stderr
    config.write_text('[build]\ncommand = "sh build.sh"\nserver_bin = "out/dflash_server"\n', encoding="utf-8")
    _commit_all(source)
    refused = _calibrate(tmp_path, "--engine-config", str(config), "--models", str(models), "--runner", "r",
                         "--catalogue", str(catalogue), "--out", str(tmp_path / "out2"), "--gate-arg=--no-such-flag")
    assert refused.returncode == 3 and "the unchanged build's gate left no evidence bundle (exit 2)" in refused.stderr
    assert "no-such-flag" in refused.stderr and _git(source, "status", "--porcelain") == ""


def test_sigterm_during_a_gate_stops_the_gate_and_applies_nothing(shell_models: Path, tmp_path: Path) -> None:
    source, config, commit = shell_engine(tmp_path)
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.sh", 'FAULT="{}"')
    argv = [*CLI, "calibrate", "--engine-config", str(config), "--models", str(shell_models), "--runner", "r",
            "--out", str(tmp_path / "out"), "--catalogue", str(catalogue), "--gate-arg=--target-device",
            "--gate-arg=cpu:0"]
    env = _env(XDG_CONFIG_HOME=str(tmp_path / "config"), DS4_PYTHON=sys.executable)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    log = tmp_path / "out" / "gates" / "control" / "gate.log"
    while not log.exists() or log.stat().st_size == 0:  # the unchanged build's gate has started
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 3 and "no mutant was applied" in out and "Traceback" not in out, out[-3000:]
    assert _git(source, "status", "--porcelain") == "" and not (tmp_path / "out" / "record").exists()
    assert not (tmp_path / "out" / "gates" / "no-rollback").exists()
    assert "interrupted by SIGTERM" in log.read_text(encoding="utf-8")  # the gate stopped its servers and sealed


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two disjoint CPU sets need two CPUs")
def test_mutants_gated_side_by_side_on_disjoint_cpu_sets_make_a_record_that_verifies(shell_models: Path,
                                                                                      tmp_path: Path) -> None:
    source, config, commit = shell_engine(tmp_path)
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.sh", 'FAULT="{}"')
    done = _calibrate(tmp_path, "--engine-config", str(config), "--models", str(shell_models), "--runner", "r",
                      "--out", str(tmp_path / "out"), "--catalogue", str(catalogue), "--jobs", "2",
                      "--cpu-sets", "affinity+online",
                      env=_env(XDG_CONFIG_HOME=str(tmp_path / "config"), DS4_PYTHON=sys.executable))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = tmp_path / "out" / "record"
    inputs = json.loads((record / "inputs.json").read_text(encoding="utf-8"))
    assert inputs["side_by_side"] == {"jobs": 2, "cpu_sets": "affinity+online"}
    gates = inputs["gates"]
    assert {g["cpu_sets"] for g in gates.values()} == {"affinity+online"}
    mutant_sets = [gates[n]["cpus"] for n in ("no-rollback", "hc-state-not-restored")]
    slots = cpusets.split(sorted(os.sched_getaffinity(0)), 2)
    assert sorted(mutant_sets) == sorted(cpu_list(s) for s in slots)  # the two ran on the two disjoint sets
    doc = json.loads((record / "calibration.json").read_text(encoding="utf-8"))
    assert doc["summary"]["line"] == "planted faults caught: 1 of 1 at every width where they can act"
    verified = subprocess.run([*CLI, "verify", str(record)], capture_output=True, text=True, check=False, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert _git(source, "status", "--porcelain") == ""


def test_mutants_gated_with_fewer_repeats_count_only_divergences_and_say_so(shell_models: Path, tmp_path: Path) -> None:
    source, config, commit = shell_engine(tmp_path)
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.sh", 'FAULT="{}"')
    done = _calibrate(tmp_path, "--engine-config", str(config), "--models", str(shell_models), "--runner", "r",
                      "--out", str(tmp_path / "out"), "--catalogue", str(catalogue), "--mutant-repeats", "1",
                      env=_env(XDG_CONFIG_HOME=str(tmp_path / "config"), DS4_PYTHON=sys.executable))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = tmp_path / "out" / "record"
    doc = json.loads((record / "calibration.json").read_text(encoding="utf-8"))
    rows = {r["name"]: r for r in doc["mutants"]}
    assert rows["no-rollback"]["repeats"] == 1 and doc["pins"]["repeats"] == 2  # the control kept the config's
    assert [(w["q"], w["verdict"], w["caught"]) for w in rows["no-rollback"]["widths"]] == [
        (2, "fail", True), (3, "fail", True), (4, "fail", True)]
    assert doc["summary"]["fewer_repeats"] == ["no-rollback"]
    assert doc["summary"]["line"] == ("planted faults caught: 1 of 1 at every width where they can act; 1 mutant(s) "
                                      "gated with fewer repeats than the unchanged build's, so at least that many caught")
    verified = subprocess.run([*CLI, "verify", str(record)], capture_output=True, text=True, check=False, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert _git(source, "status", "--porcelain") == ""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two disjoint CPU sets need two CPUs")
def test_sigterm_with_gates_side_by_side_stops_every_gate_and_writes_no_record(shell_models: Path, tmp_path: Path) -> None:
    source, config, commit = shell_engine(tmp_path)
    catalogue = _catalogue(tmp_path / "c.toml", commit, "server.sh", 'FAULT="{}"')
    argv = [*CLI, "calibrate", "--engine-config", str(config), "--models", str(shell_models), "--runner", "r",
            "--out", str(tmp_path / "out"), "--catalogue", str(catalogue), "--gate-arg=--target-device",
            "--gate-arg=cpu:0", "--jobs", "2", "--cpu-sets", "affinity"]
    env = _env(XDG_CONFIG_HOME=str(tmp_path / "config"), DS4_PYTHON=sys.executable)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    logs = [tmp_path / "out" / "gates" / name / "gate.log" for name in ("no-rollback", "hc-state-not-restored")]
    while not all(log.exists() and log.stat().st_size > 0 for log in logs):  # both mutants' gates have started
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 3 and "Traceback" not in out, out[-3000:]
    assert _git(source, "status", "--porcelain") == "" and not (tmp_path / "out" / "record").exists()
    for log in logs:  # each gate side by side stopped its servers and sealed
        assert "interrupted by SIGTERM" in log.read_text(encoding="utf-8"), log.read_text(encoding="utf-8")[-2000:]

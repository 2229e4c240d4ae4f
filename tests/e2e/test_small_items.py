"""The smaller items of issue 41, each walked as a user meets it: a missing model file keeps its evidence, a
mistyped path flag is a usage error, Ctrl-C says its reason once and a second one is heard, `config check` names
the file it read, every command's --runner/--widths/--format say what they take, and the docs install ds4ci
the way it can be installed."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace
from paths import ROOT

from ds4ci.commands import exitcodes

pytestmark = pytest.mark.e2e


def test_a_missing_model_file_keeps_evidence_and_a_mistyped_flag_is_a_usage_error(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = tmp_path / "ds4ci.toml"
    config.write_text(f'[gate]\ntarget = "{tmp_path / "staged-later.gguf"}"\ntarget_sha256 = "{"a" * 64}"\n')
    missing = ws.gate(widths="2", config=config, target=None, target_sha256=None)
    assert missing.code == 3, missing.stderr
    assert missing.results is not None, "a run that stopped at a missing model file wrote no results"
    assert "staged-later.gguf does not exist" in missing.reasons()
    assert (Path(missing.results["evidence"]["dir"]) / "manifest.json").is_file()  # sealed evidence, kept
    typo = ws.gate(widths="2", target=tmp_path / "typo.gguf")
    assert typo.code == 2 and typo.results is None, typo.stderr
    assert "--target " in typo.stderr and "typo.gguf: expected the target file, found nothing there" in typo.stderr
    source = ws.gate(widths="2", source_dir=tmp_path / "no-such-checkout")
    assert source.code == 2 and "--source-dir" in source.stderr, source.stderr


def test_ctrl_c_says_its_reason_once_and_a_second_one_kills_the_servers(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    proc = subprocess.Popen(
        [DS4CI, "gate", *ws.args(widths="2", stop_timeout=600)], cwd=ws.checkout(), text=True,
        env=ws.env(faults="slow-teardown"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []
    seen = {"ready": threading.Event(), "stopping": threading.Event()}

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "target-only: ready" in line:
                seen["ready"].set()
            if "target-only: stopping (SIGTERM" in line:
                seen["stopping"].set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert seen["ready"].wait(120), "".join(lines)
        proc.send_signal(signal.SIGINT)  # the server then takes 120 s to go after its SIGTERM (slow-teardown)
        assert seen["stopping"].wait(120), "".join(lines)
        proc.send_signal(signal.SIGINT)  # not waiting out stop_timeout (600 s)
        assert proc.wait(timeout=300) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join()
    err = "".join(lines)
    assert "ds4ci: SIGINT again: no more waiting; every server still stopping gets SIGKILL now" in err, err
    assert "target-only: stopped in" in err and "(SIGKILL)" in err
    errors = [line for line in err.splitlines() if "ds4ci was interrupted by SIGINT" in line and "error:" in line]
    assert len(errors) == 1 and "stderr.log" not in errors[0], errors
    assert proc.stdout is not None and proc.stdout.read().count("- ds4ci was interrupted by SIGINT") == 1


def test_config_check_names_the_file_it_was_given(tmp_path: Path) -> None:
    (tmp_path / "typo3.toml").write_text("[gate]\nwidths = [2]\nbogus = 1\n[bogus_section]\n")
    proc = subprocess.run([DS4CI, "config", "check", "--config", "typo3.toml"], cwd=tmp_path, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2
    assert "typo3.toml: unknown key(s) bogus_section" in proc.stderr and "ds4ci.toml" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", sorted(exitcodes.COMMANDS))
def test_runner_widths_and_format_say_what_they_take(command: str, tmp_path: Path) -> None:
    proc = subprocess.run([DS4CI, *command.split(), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert not re.findall(r"--(?:runner|widths|format) TEXT", proc.stdout), proc.stdout


def test_no_doc_installs_ds4ci_from_a_registry_it_is_not_on() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{page.name}: {line.strip()}" for page in pages for line in page.read_text().splitlines()
             if re.search(r"pip install (?:-\S+ )*ds4ci(?:\[[a-z,]+\])?(?:\s|$)", line)]
    assert not found, found


def test_the_readme_says_how_many_test_modules_need_pytorch() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    stated = re.search(r"without it their (\w+) modules are skipped at collection", readme)
    assert stated is not None
    needing = [p for p in (ROOT / "tests").rglob("test_*.py")
               if re.search(r'^\w+ = pytest\.importorskip\("torch"\)|^pytest\.importorskip\("torch"\)',
                            p.read_text(), re.MULTILINE)]
    words = {"four": 4, "five": 5, "six": 6, "seven": 7}
    assert words[stated.group(1)] == len(needing), needing

"""ds4ci.toml loading: precedence, per-runner tables, variables, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.options import config, inputfiles

SHA = "a" * 64


def write_models(root: Path) -> None:
    (root / "m").mkdir()
    for name in ("t.gguf", "d.gguf", "p.txt"):
        (root / "m" / name).write_text(name)
    server = root / "server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)


def toml(root: Path, extra: str = "", model_dir: str = "m") -> Path:
    path = root / "ds4ci.toml"
    path.write_text(
        "[gate]\n"
        'server_bin = "server"\n'
        f'target = "{model_dir}/t.gguf"\ntarget_sha256 = "{SHA}"\n'
        f'draft = "{model_dir}/d.gguf"\ndraft_sha256 = "{SHA}"\n'
        f'prompts = [{{file = "m/p.txt", sha256 = "{SHA}"}}]\n'
        "widths = [2, 3]\n" + extra
    )
    return path


def test_file_values_relative_paths_and_cli_precedence(tmp_path: Path) -> None:
    write_models(tmp_path)
    cfg = config.load(toml(tmp_path), {"widths": "3", "runner": "r1"})
    assert cfg.target.path == tmp_path / "m" / "t.gguf"
    assert cfg.widths == (3,) and cfg.mmvq_max_ncols == 3 and cfg.scope == "focused"
    assert cfg.evidence_dir == Path("ds4ci-evidence").absolute()
    assert cfg.runner == "r1" and cfg.role == "gate"


def test_widths_outside_the_configured_set_are_refused_not_a_focused_rerun(tmp_path: Path) -> None:
    write_models(tmp_path)
    with pytest.raises(UsageError, match=r"--widths 2,3,5: 5 not among the configured widths 2,3 \(gate.widths\)"):
        config.load(toml(tmp_path), {"widths": "2,3,5", "runner": "r1"})
    assert config.load(toml(tmp_path), {"widths": "2,3", "runner": "r1"}).scope == "full"


def test_per_runner_table_overrides_gate_and_sets_role(tmp_path: Path) -> None:
    write_models(tmp_path)
    extra = (
        '[runners.gfx1151]\ntarget_device = "hip:0"\n'
        '[runners.sm86]\ntarget_device = "cuda:0"\nrole = "negative-control"\nnegative_control_for = "gfx1151"\n'
    )
    path = toml(tmp_path, extra)
    amd = config.load(path, {"runner": "gfx1151"})
    nvidia = config.load(path, {"runner": "sm86", "target_device": None})
    assert amd.target_device == "hip:0" and amd.role == "gate"
    assert nvidia.target_device == "cuda:0" and nvidia.role == "negative-control"
    assert nvidia.negative_control_for == "gfx1151"
    assert config.load(path, {"runner": "sm86", "target_device": "cuda:1"}).target_device == "cuda:1"
    with pytest.raises(UsageError, match=r"no \[runners.other\] table; configured runners: gfx1151, sm86"):
        config.load(path, {"runner": "other"})


def test_unknown_keys_are_rejected_with_the_allowed_list(tmp_path: Path) -> None:
    write_models(tmp_path)
    with pytest.raises(UsageError, match=r"unknown key.*widht"):
        config.load(toml(tmp_path, "widht = 3\n"), {})


def test_environment_variables_expand_and_unset_ones_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_models(tmp_path)
    path = toml(tmp_path, model_dir="${DS4_MODEL_DIR}")
    monkeypatch.delenv("DS4_MODEL_DIR", raising=False)
    with pytest.raises(UsageError, match="DS4_MODEL_DIR is not set"):
        config.load(path, {})
    monkeypatch.setenv("DS4_MODEL_DIR", str(tmp_path / "m"))
    assert config.load(path, {}).draft.path == tmp_path / "m" / "d.gguf"


def test_checks_are_validated(tmp_path: Path) -> None:
    write_models(tmp_path)
    good = config.load(toml(tmp_path, '[[checks]]\nname = "unit"\ncommand = "true"\nparser = "exit-code"\n'), {})
    assert good.checks[0].name == "unit" and good.checks[0].cwd == tmp_path
    with pytest.raises(UsageError, match="declared twice"):
        config.load(toml(tmp_path, '[[checks]]\nname = "u"\ncommand = "true"\n[[checks]]\nname = "u"\ncommand = "true"\n'), {})
    with pytest.raises(UsageError, match="needs report"):
        config.load(toml(tmp_path, '[[checks]]\nname = "u"\ncommand = "true"\nparser = "junit"\n'), {})


def test_unpinned_model_and_non_executable_server_are_usage_errors(tmp_path: Path) -> None:
    write_models(tmp_path)
    path = toml(tmp_path)
    unpinned = tmp_path / "unpinned.toml"
    unpinned.write_text("\n".join(line for line in path.read_text().splitlines() if "target_sha256" not in line))
    with pytest.raises(UsageError, match="target file must be pinned"):
        config.load(unpinned, {})
    (tmp_path / "server").chmod(0o644)
    cfg = config.load(path, {})  # the runner's state, like a wrong pin: checked in the run (exit 3, evidence kept)
    with pytest.raises(NoVerdictError, match="not executable"):
        inputfiles.require_present(cfg.prompts, (cfg.target, cfg.draft), cfg.server_bin)


def test_a_prompt_given_twice_is_a_usage_error(tmp_path: Path) -> None:
    write_models(tmp_path)
    prompt = tmp_path / "m" / "p.txt"
    with pytest.raises(UsageError, match="given twice"):
        config.load(toml(tmp_path), {"prompt_files": [prompt, prompt], "prompt_sha256s": [SHA, SHA]})


def test_scope_is_full_only_when_every_configured_width_runs(tmp_path: Path) -> None:
    write_models(tmp_path)
    path = toml(tmp_path)  # widths = [2, 3]
    assert config.load(path, {"runner": "r1"}).scope == "full"
    assert config.load(path, {"runner": "r1", "widths": "3,2"}).scope == "full"
    assert config.load(path, {"runner": "r1", "widths": "2"}).scope == "focused"
    for outside in ("2,3,4", "4"):  # not configured widths: refused, neither full nor a focused rerun
        with pytest.raises(UsageError, match="not among the configured widths"):
            config.load(path, {"runner": "r1", "widths": outside})


def test_devices_and_parallel_from_the_file_and_a_runner_table(tmp_path: Path) -> None:
    write_models(tmp_path)
    extra = ('target_device = "cuda:0"\ndevices = ["cuda:0", "cuda:1", "cuda:2"]\n'
             '[runners.many]\nrole = "gate"\n[runners.one]\ndevices = ["cuda:0"]\nparallel = 3\n')
    path = toml(tmp_path, extra)
    many = config.load(path, {"runner": "many"})
    assert many.devices == many.arm_devices() == ("cuda:0", "cuda:1", "cuda:2") and many.parallel == 1
    one = config.load(path, {"runner": "one"})
    assert one.arm_devices() == ("cuda:0",) and one.parallel == 3
    flags = config.load(path, {"runner": "many", "devices": "cuda:1,cuda:0", "parallel": 2})
    assert flags.arm_devices() == ("cuda:1", "cuda:0") and flags.parallel == 2
    plain = config.load(toml(tmp_path, 'target_device = "hip:1"\n'), {"runner": "r"})
    assert plain.devices == () and plain.arm_devices() == ("hip:1",) and plain.parallel == 1


@pytest.mark.parametrize(("extra", "message"), [
    ('target_device = "cuda:0"\ndevices = ["cuda:0", "cuda:0"]\n', r"cuda:0 listed twice"),
    ('target_device = "cuda:0"\ndevices = []\n', r"expected a non-empty list of devices"),
    ('target_device = "cuda:0"\ndevices = "cuda:0"\n', r"gate.devices"),
    ('target_device = "cuda:0"\ndevices = ["cuda:0", 1]\n', r"gate.devices"),
    ('target_device = "cuda:0"\ndevices = ["cuda:0", "gpu"]\n', r"expected a device like hip:0 or cuda:0, found 'gpu'"),
    ('target_device = "cuda:0"\ndevices = ["cuda:0", "hip:0"]\n', r"devices of one kind"),
    ('devices = ["cuda:0", "cuda:1"]\n', r"not of target_device's kind \(hip:0\)"),
    ('target_device = "cuda:0"\ndevices = ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]\n',
     r"4 listed, but the gate has only 3 arms"),
    ("parallel = 0\n", r"gate.parallel"),
    ("parallel = 4\n", r"parallel = 4, but the gate has only 3 arms \(target-only and 2 width\(s\)\)"),
    ('parallel = "2"\n', r"gate.parallel"),
])
def test_devices_and_parallel_fail_closed(tmp_path: Path, extra: str, message: str) -> None:
    write_models(tmp_path)
    with pytest.raises(UsageError, match=message):
        config.load(toml(tmp_path, extra), {"runner": "r"})

"""What `ds4ci gate` prints on stderr in each output mode: Actions groups and annotations, plain, terminal."""

from __future__ import annotations

import re
from pathlib import Path

from gatekit import Workspace

ANSI = re.compile(r"\x1b\[")
SERVER_GROUPS = ["target-only server", "reference-exact q=2 server", "reference-exact q=3 server"]


def actions_env(ws: Workspace, faults: str | None = None, **extra: str) -> dict[str, str]:
    env = ws.env(faults, GITHUB_ACTIONS="true", **extra)
    env.pop("DS4CI_LOG", None)
    return env


def plain_env(ws: Workspace, faults: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in ws.env(faults).items() if k not in ("GITHUB_ACTIONS", "DS4CI_LOG", "NO_COLOR", "TERM")}
    return {**env, **extra}


def groups(stderr: str) -> list[tuple[str, list[str]]]:
    """(title, lines) of every ::group::, checking that each is closed before the next opens."""
    found: list[tuple[str, list[str]]] = []
    open_title: str | None = None
    for line in stderr.splitlines():
        if line.startswith("::group::"):
            assert open_title is None, f"group {line!r} opened inside {open_title!r}"
            open_title = line.removeprefix("::group::")
            found.append((open_title, []))
        elif line == "::endgroup::":
            assert open_title is not None, "::endgroup:: without a group"
            open_title = None
        elif open_title is not None:
            found[-1][1].append(line)
    assert open_title is None, f"group {open_title!r} never closed"
    return found


def unescape(value: str) -> str:
    return value.replace("%2C", ",").replace("%3A", ":").replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")


def test_under_actions_each_server_lives_in_one_group_and_a_pass_is_a_notice(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2,3", env=actions_env(ws))
    assert run.code == 0, run.stderr
    found = groups(run.stderr)
    titles = [title for title, _ in found]
    assert titles == ["input identities", *SERVER_GROUPS]
    for (title, body), label in zip(found[1:], ["target-only", "reference-exact q=2", "reference-exact q=3"], strict=True):
        assert title == f"{label} server"
        assert any(line.startswith(f"{label}: server pid ") for line in body), body  # start ...
        assert f"{label}: ready in" in "\n".join(body)  # ... health ...
        assert any(line.startswith(f"{label}: prompt 0 request 1/2: answered") for line in body)  # ... requests ...
        assert body[-2].startswith(f"{label}: stopping")  # ... and stop, all inside
        assert re.fullmatch(rf"{label}: stopped in \d+\.\d\d s, exit code 0", body[-1]), body[-1]
    assert not any(line.startswith("[ds4ci ") for line in run.stderr.splitlines())  # the runner stamps lines itself
    assert not ANSI.search(run.stderr)
    assert run.results is not None
    assert run.stderr.splitlines()[-1] == (
        # 2,3 of the default 2,3,4: a focused rerun, and the verdict line says so
        "::notice title=ds4ci gate (test-runner)::verdict PASS (focused rerun: q=2,3 of the configured 2,3,4) "
        f"(exit code 0); evidence: {run.results['evidence']['dir']}"
    )
    assert "::error" not in run.stderr


def test_under_actions_a_leaked_approximate_verifier_is_an_error_on_the_servers_log(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", env=actions_env(ws, "leak-fused-verify"))
    assert run.code == 1, run.stderr
    assert run.results is not None and run.results["verdict"] == "fail"
    errors = [line for line in run.stderr.splitlines() if line.startswith("::error")]
    match = re.fullmatch(r"::error file=([^,]+),title=ds4ci gate \(test-runner\)::(.*)", errors[0])
    assert match is not None, errors
    evidence = Path(run.results["evidence"]["dir"])
    assert Path(unescape(match.group(1))) == evidence / "servers" / "q2" / "stderr.log"
    assert Path(unescape(match.group(1))).is_file()
    assert unescape(match.group(2)) == run.results["reasons"][0]
    assert "token IDs differ" in match.group(2)
    assert errors[-1] == (
        "::error title=ds4ci gate (test-runner)::verdict FAIL (focused rerun: q=2 of the configured 2,3,4) "
        f"(exit code 1); evidence: {evidence}; 1 reason(s)"
    )
    assert [t for t, _ in groups(run.stderr)] == ["input identities", "target-only server", "reference-exact q=2 server"]


def test_under_actions_a_toml_syntax_error_points_at_its_line(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = tmp_path / "ds4ci.toml"
    config.write_text('[gate]\nwidths = "2"\nrepeats = \n')
    run = ws.gate(widths="2", env=actions_env(ws), config=config)
    assert run.code == 2, run.stderr
    line = next(ln for ln in run.stderr.splitlines() if ln.startswith("::error"))
    assert line.startswith(f"::error file={config},line=3,title=ds4ci gate%3A config::config file {config} is not valid TOML")
    assert "ds4ci: error: config file" in run.stderr  # the CLI's own line is still there


def test_plain_mode_prints_no_workflow_commands(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", env=plain_env(ws, "leak-fused-verify"))
    assert run.code == 1, run.stderr
    lines = run.stderr.splitlines()
    assert not [ln for ln in lines if ln.startswith("::")]
    assert all(re.match(r"\[ds4ci \d\d:\d\d:\d\d\] ", ln) for ln in lines if ln and not ln.startswith(" ")), lines
    assert any(ln.endswith("] == target-only server") for ln in lines)
    assert any(ln.endswith("] == reference-exact q=2 server") for ln in lines)
    assert any("] error: ds4ci gate (test-runner): q=2 prompt 0" in ln and ln.endswith("/servers/q2/stderr.log)")
               for ln in lines), lines
    assert lines[-1].endswith("; 1 reason(s)") and "] error: ds4ci gate (test-runner): verdict FAIL" in lines[-1]
    assert not ANSI.search(run.stderr)


def test_forced_terminal_mode_colours_unless_no_color(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    coloured = ws.gate(widths="2", env=plain_env(ws, "leak-fused-verify", DS4CI_LOG="terminal"))
    assert coloured.code == 1, coloured.stderr
    assert "\x1b[1;31merror: " in coloured.stderr and "\x1b[1m== target-only server\x1b[0m" in coloured.stderr
    bare = ws.gate(widths="2", env=plain_env(ws, "leak-fused-verify", DS4CI_LOG="terminal", NO_COLOR="1"))
    assert bare.code == 1, bare.stderr
    assert not ANSI.search(bare.stderr) and "error: ds4ci gate (test-runner): verdict FAIL" in bare.stderr


def test_a_heartbeat_while_a_server_loads_and_while_a_request_is_in_flight(tmp_path: Path) -> None:
    """A slow model load and a slow answer each print "still ..." lines (short interval from DS4CI_HEARTBEAT_S)."""
    ws = Workspace.create(tmp_path)
    env = plain_env(ws, DS4CI_HEARTBEAT_S="0.1", DS4SIM_STARTUP_DELAY="1.5", DS4SIM_TOKEN_DELAY="0.02")
    run = ws.gate(widths="2", env=env)
    assert run.code == 0, run.stderr
    beats = [ln.split("] ", 1)[1] for ln in run.stderr.splitlines() if "still " in ln]
    loading = [b for b in beats if b.startswith("target-only: still loading: ")]
    assert loading and all(re.fullmatch(r"target-only: still loading: \d+ s, log \+\d+(\.\d)? (B|KiB)", b) for b in loading)
    assert any(b.startswith("reference-exact q=2: still loading: ") for b in beats), beats
    assert any(re.fullmatch(r"target-only: still waiting for the answer: \d+ s, log \+.+", b) for b in beats), beats
    bad = ws.gate(widths="2", env=plain_env(ws, DS4CI_HEARTBEAT_S="often"))
    assert bad.code == 2 and "DS4CI_HEARTBEAT_S must be a positive number of seconds" in bad.stderr


def test_under_actions_the_build_and_each_check_have_their_own_group(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    script = tmp_path / "build.sh"
    script.write_text(f"#!/bin/sh\nset -e\nmkdir -p out\necho '[1/1] Linking'\ncp '{ws.server}' out/dflash_server\n")
    script.chmod(0o755)
    config = tmp_path / "ds4ci.toml"
    config.write_text(
        '[build]\ncommand = "./build.sh"\ncwd = "."\nserver_bin = "out/dflash_server"\n'
        '[[checks]]\nname = "lint"\ncommand = "echo lint: 3 problems; exit 3"\n'
        '[[checks]]\nname = "unit tests"\ncommand = "true"\n'
    )
    run = ws.gate(widths="2", server_bin=None, config=config, env=actions_env(ws))
    assert run.code == 1, run.stdout + run.stderr
    found = dict(groups(run.stderr))
    # The checks run right after the build: no PR process runs once a file is hashed or a server has started.
    assert list(found) == ["build", "check lint", "check unit tests", "input identities", "target-only server",
                           "reference-exact q=2 server"]
    assert found["build"][0].startswith("build: running `./build.sh`") and found["build"][-1].startswith("build: pass")
    assert found["check lint"][-1].startswith("check lint: fail: exit code 3")
    assert "::error title=ds4ci gate (test-runner)::check 'lint': fail: exit code 3" in run.stderr.splitlines()

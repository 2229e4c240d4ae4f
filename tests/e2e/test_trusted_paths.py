"""One resolver: every configured folder inside the checkout is opened once, beneath it, with no link followed,
and the sandbox binds the descriptor it opened, never the path again.

Each attack is a real gate on a real git checkout that commits a link (the build and the checks run under
bubblewrap), or a real bubblewrap process started as root and as the unprivileged user ``nobody``:

- a link at the root of each configured folder (``[build] cwd``, the built server's folder, a check's folder and
  its report's folder, a ``[sandbox] ro_paths`` and a ``rw_paths`` entry) stops the gate before the build, the
  first pull-request process, starts: the marker file the build would write is absent, the message names the
  setting, the path and the link;
- the binds are made from descriptors: a folder swapped for a link after the view was opened is still shown as it
  was when opened;
- a self-hosted runner's install: ``out/bin`` committed as a link to the runner's own ``externals/node20/bin``
  is refused, and the runner's ``node`` is untouched; nothing inside the install but ``_work`` is ever bound;
- a relative ``ro_paths`` entry committed as a link to a credentials file outside (``~/.config/gh/hosts.yml``)
  is refused and the token is in no log.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from gatekit import Workspace
from test_built_links import NOBODY, gate, root, user  # noqa: F401 - root, user: fixtures
from test_sandbox_binds import as_user, everything_under  # noqa: F401 - as_user: a fixture

from ds4ci.gate import views
from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")

TOKEN = "gho_SECRET-oauth-token-ds4ci-must-hide"


def commit(checkout: Path) -> None:
    """Commit everything in the checkout, links included: what a pull request's head would hold."""
    git = ["git", "-C", str(checkout), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "the pull request"], check=True)


def gate_with(ws: Workspace, config: str, who: str = "root") -> tuple[int, str, dict[str, object] | None]:
    """``ds4ci gate`` in the checkout with ``config`` committed there (paths relative to the checkout), as ``who``
    (``nobody``: the system's Python with this venv's packages, every file of the scratch folder its own)."""
    checkout = ws.checkout()
    (checkout / "ds4ci.toml").write_text(config)
    commit(checkout)
    if who == "nobody":
        top = Path(*ws.root.parts[:3])  # the scratch folder (/tmp/ds4ci-links-...): the runner's user owns it all
        for path in (top, *top.rglob("*")):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    run = gate(ws, who, checkout / "ds4ci.toml")
    return run.code, run.stdout + run.stderr, run.results


LINKED = {  # setting -> (config, the folder committed as a link, relative to the checkout)
    "build.cwd": ('[build]\ncwd = "src"\n', "src"),
    "build.server_bin (its folder)": ('[build]\ncwd = "."\nserver_bin = "out/bin/dflash_server"\n', "out/bin"),
    "checks 'unit' cwd": ('[build]\ncwd = "."\n\n[[checks]]\nname = "unit"\ncommand = "true"\ncwd = "tests"\n', "tests"),
    "checks 'unit' report (its folder)": (
        '[build]\ncwd = "."\n\n[[checks]]\nname = "unit"\ncommand = "true"\nparser = "junit"\n'
        'report = "build/junit.xml"\ncwd = "."\n', "build"),
    "sandbox.ro_paths": ('[build]\ncwd = "src"\n\n[sandbox]\nro_paths = ["data"]\n', "data"),
    "sandbox.rw_paths": ('[build]\ncwd = "src"\n\n[sandbox]\nrw_paths = ["cache"]\n', "cache"),
}


@pytest.mark.parametrize("key", list(LINKED))
def test_a_link_at_the_root_of_each_configured_folder_is_refused_before_any_pr_process(tmp_path: Path, key: str) -> None:
    ws = Workspace.create(tmp_path)
    checkout = ws.checkout()
    outside = tmp_path / "outside"
    outside.mkdir()
    config, linked = LINKED[key]
    link = checkout / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(outside, link.parent))
    if linked != "src":  # a build folder of its own, for the settings that name one (its marker lands there)
        (checkout / "src").mkdir()
        (checkout / "src" / "README").write_text("the engine\n")
    build = 'command = "touch the-build-ran"\n' + ("" if "server_bin" in config else 'server_bin = "out/dflash_server"\n')
    code, said, results = gate_with(ws, config.replace("[build]\n", f"[build]\n{build}", 1))
    ran = [checkout / "the-build-ran", checkout / "src" / "the-build-ran"]
    assert not list(outside.iterdir()) and not any(p.exists() for p in ran), said  # no PR process ran
    assert code == 3 and results is not None and results["verdict"] == "error", said
    assert f"{key} = {link}: {link} is a symbolic link (to {os.path.relpath(outside, link.parent)})" in said, said
    assert "no PR code was run" in said


def _swapped_after_open(who: str, folder: Path, nested: bool) -> subprocess.CompletedProcess[str]:
    """``cat checkout/src/file`` under bwrap, the view opened (the argv built) before the PR swaps ``src`` for a link
    to a folder holding a secret; ``nested``: the checkout is bound too (``src`` a writable bind inside it)."""
    checkout = folder / "checkout"
    (checkout / "src").mkdir(parents=True)
    (checkout / "src" / "file").write_text("the folder ds4ci opened\n")
    (folder / "secret").mkdir()
    (folder / "secret" / "file").write_text(f"{TOKEN}\n")
    (folder / "scratch").mkdir()
    for path in (folder, *folder.rglob("*")):
        if who == "nobody":
            os.chown(path, 65534, 65534)
    view = sandbox.View(ro=(checkout,) if nested else (), rw=(checkout / "src",), trees=(checkout,))
    read_fd, write_fd = os.pipe()
    argv = sandbox.argv(["cat", str(checkout / "src" / "file")], sandbox.Policy(), view, scratch=folder / "scratch",
                        cwd=None, status_fd=write_fd, unprivileged=who == "nobody")
    try:
        (checkout / "src").rename(checkout / "moved")  # the swap, after the resolver opened the folder
        (checkout / "src").symlink_to(folder / "secret")
        assert "--bind-fd" in argv and len(argv.fds) == (2 if nested else 1)
        assert str(checkout / "src") not in [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
        return subprocess.run(list(argv), pass_fds=(write_fd, *argv.fds), capture_output=True, text=True, timeout=60,
                              check=False, env=sandbox.environment({"PATH": sandbox.DEFAULT_PATH}),
                              preexec_fn=(lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)))
                              if who == "nobody" else None)
    finally:
        argv.close()
        os.close(write_fd)
        os.close(read_fd)


def test_binds_are_made_from_descriptors_and_a_swap_after_the_open_shows_the_folder_opened(
    as_user: tuple[str, Path],  # noqa: F811
) -> None:
    """bwrap binds the descriptor it was given (``--bind-fd``), so the sandbox shows the folder the resolver opened."""
    done = _swapped_after_open(*as_user, nested=False)
    assert TOKEN not in done.stdout + done.stderr
    assert done.stdout == "the folder ds4ci opened\n", done.stderr


def test_a_swap_inside_a_bound_checkout_stops_bwrap_and_shows_nothing(as_user: tuple[str, Path]) -> None:  # noqa: F811
    """Where the swapped folder's place inside the sandbox lies in the bound checkout (now a link there), bwrap refuses
    to mount on it: the process never starts and the secret is shown to nothing."""
    done = _swapped_after_open(*as_user, nested=True)
    assert done.returncode != 0 and done.stdout == "", done.stderr
    assert TOKEN not in done.stderr and "Can't bind mount" in done.stderr, done.stderr


def fake_runner(folder: Path) -> tuple[Path, Path]:
    """A self-hosted runner's install (``.runner``, ``.credentials``, ``bin``, ``externals/node20/bin/node``, ``_work``);
    (the install, its node)."""
    install = folder / "actions-runner"
    node = install / "externals" / "node20" / "bin" / "node"
    node.parent.mkdir(parents=True)
    node.write_text("#!/bin/sh\necho the runner's own node\n")
    node.chmod(0o755)
    (install / "bin").mkdir()
    (install / ".runner").write_text('{"agentName": "gpu-1"}\n')
    (install / ".credentials").write_text('{"token": "RUNNER-SECRET"}\n')
    (install / "_work").mkdir()
    return install, node


def test_a_build_folder_linked_into_the_runners_node_is_refused_and_node_is_untouched(user: str, root: Path) -> None:  # noqa: F811
    """The pull request commits ``out/bin`` as a link to the runner's own ``externals/node20/bin`` (``[build] cwd =
    "src"``, ``server_bin = "out/bin/dflash_server"``): a writable bind of it would let the build replace the ``node``
    the job's next step runs outside every sandbox. It is refused before the build starts."""
    install, node = fake_runner(root)
    before = node.read_bytes()
    ws = Workspace.create(install / "_work" / "engine")
    checkout = ws.checkout()
    (checkout / "src").mkdir()
    (checkout / "src" / "build.sh").write_text("#!/bin/sh\necho pwned > ../out/bin/node\n")
    (checkout / "out").mkdir()
    target = os.path.relpath(node.parent, checkout / "out")
    (checkout / "out" / "bin").symlink_to(target)
    config = '[build]\ncommand = "sh build.sh; touch the-build-ran"\ncwd = "src"\nserver_bin = "out/bin/dflash_server"\n'
    code, said, _ = gate_with(ws, config, user)
    assert node.read_bytes() == before and not (checkout / "src" / "the-build-ran").exists(), said
    assert code == 3
    assert f"build.server_bin (its folder) = {checkout}/out/bin: {checkout}/out/bin is a symbolic link (to {target})" in said


def test_nothing_in_a_runners_install_but_its_work_folder_is_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install, node = fake_runner(tmp_path)
    checkout = install / "_work" / "engine" / "engine"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    policy = sandbox.Policy(homes=views.runner_folders(), installs=views.runner_installs())
    assert views.runner_installs() == (install,)
    sandbox.close_binds(sandbox.checked_binds(policy, sandbox.View(ro=(checkout,))))
    for shown in (node.parent, install / "bin", install / "externals"):
        with pytest.raises(sandbox.BindRefused, match="a self-hosted runner's install"):
            sandbox.checked_binds(policy, sandbox.View(ro=(shown,)))


def test_a_relative_ro_path_linked_to_the_gh_token_is_refused_and_in_no_log(user: str, root: Path) -> None:  # noqa: F811
    hosts = root / "runner-home" / ".config" / "gh" / "hosts.yml"
    hosts.parent.mkdir(parents=True)
    hosts.write_text(f"github.com:\n    oauth_token: {TOKEN}\n    user: maintainer\n")
    ws = Workspace.create(root)
    checkout = ws.checkout()
    (checkout / "src").mkdir()
    (checkout / "src" / "README").write_text("the engine\n")
    (checkout / "hosts.yml").symlink_to(hosts)
    config = (f'[build]\ncommand = "cat {shlex.quote(str(checkout / "hosts.yml"))}; touch the-build-ran"\ncwd = "src"\n'
              'server_bin = "src/out/dflash_server"\n\n[sandbox]\nro_paths = ["hosts.yml"]\n')
    code, said, _ = gate_with(ws, config, user)
    assert TOKEN not in said
    assert TOKEN.encode() not in everything_under(ws.root / "evidence")
    assert code == 3 and not (checkout / "src" / "the-build-ran").exists(), said
    assert f"sandbox.ro_paths = {checkout}/hosts.yml: {checkout}/hosts.yml is a symbolic link (to {hosts})" in said

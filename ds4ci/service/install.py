"""``ds4ci service install``: the systemd units, the tmpfiles entry and the runner key for the gate service.

What it writes (each path under ``--root`` when given, for a staged copy or a test):

- ``/etc/systemd/system/ds4ci-gate.socket``: systemd makes the socket, mode 0660, owned by the
  service user and the socket group (the runner user joins that group), so the service needs no
  group of the runner's;
- ``/etc/systemd/system/ds4ci-gate.service``: ``python -I -m ds4ci service run`` as the service user,
  umask 0077, with ``/etc/ds4ci/service.env`` for the runner's variables (e.g. ``DS4_MODEL_DIR``);
- ``/etc/tmpfiles.d/ds4ci-gate.conf``: the state and config folders, mode 0700, the service user's;
- ``CONFIG_DIR/runner-key.pem``: a new key, or the one ``--key-from`` names moved there (the old
  file is removed), mode 0600, owned by the service user: no job's user can read it any more.

It refuses an install of ds4ci that a user other than root or the service user could change: the
service would run that code with the key. Without ``--root`` it must run as root, creates the system
user and group when missing, and prints the systemctl commands to start it (it starts nothing).
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.evidence import keys
from ds4ci.options.values import runner_name

UNIT: Final = "ds4ci-gate"


@dataclass(frozen=True)
class Plan:
    user: str
    group: str  # the socket's: the runner user joins it
    socket: Path
    config_dir: Path
    state_dir: Path
    runners: tuple[str, ...]
    trusted_repo: str | None = None  # required: the service reads the gate's config from nowhere else
    trusted_branch: str = "main"
    key_from: Path | None = None
    root: Path | None = None
    dry_run: bool = False

    def at(self, path: Path) -> Path:
        return self.root / path.relative_to("/") if self.root is not None else path

    @property
    def key(self) -> Path:
        return self.config_dir / keys.KEY_FILE


def socket_unit(plan: Plan) -> str:
    return "\n".join([
        "[Unit]", "Description=ds4ci gate service socket (docs/service.md)", "",
        "[Socket]", f"ListenStream={plan.socket}", f"SocketUser={plan.user}", f"SocketGroup={plan.group}",
        "SocketMode=0660", "DirectoryMode=0755", "Accept=no", "",
        "[Install]", "WantedBy=sockets.target", ""])


def service_unit(plan: Plan, python: str) -> str:
    argv = [python, "-I", "-m", "ds4ci", "service", "run", "--socket", str(plan.socket),
            "--state-dir", str(plan.state_dir), "--signing-key", str(plan.key),
            "--trusted-repo", str(plan.trusted_repo), "--trusted-branch", plan.trusted_branch]
    for name in plan.runners:
        argv += ["--runner", name]
    return "\n".join([
        "[Unit]", "Description=ds4ci gate service: gates a commit, signs with a key no job can read",
        f"Requires={UNIT}.socket", f"After={UNIT}.socket network-online.target", "",
        "[Service]", "Type=simple", f"User={plan.user}", f"Group={plan.user}", "UMask=0077",
        f"ExecStart={shlex.join(argv)}", f"EnvironmentFile=-{plan.config_dir / 'service.env'}",
        f"WorkingDirectory={plan.state_dir}", "PrivateTmp=yes", "KillMode=control-group", "TimeoutStopSec=60",
        "Restart=on-failure", "", "[Install]", "WantedBy=multi-user.target", ""])


def tmpfiles(plan: Plan) -> str:
    return "\n".join([
        f"d {plan.state_dir} 0700 {plan.user} {plan.user} -",
        f"d {plan.config_dir} 0700 {plan.user} {plan.user} -", ""])


def writable_by_others(paths: Sequence[Path], allowed: set[int]) -> list[str]:
    """Files and folders of the install that a user outside ``allowed`` could change (owner or w bits)."""
    found = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        if st.st_uid not in allowed or (st.st_mode & 0o022 and not stat.S_ISVTX & st.st_mode):
            found.append(f"{path} (uid {st.st_uid}, {stat.filemode(st.st_mode)})")
    return found


def install_paths() -> list[Path]:
    import ds4ci

    package = Path(ds4ci.__file__).resolve().parent
    executable = Path(sys.executable).resolve()
    return [executable, *executable.parents, package, *package.parents, *package.rglob("*")]


def _owner(plan: Plan) -> tuple[int, int] | None:
    """(uid, gid) to give the key and folders, or None where that cannot be done (say why elsewhere)."""
    try:
        entry = pwd.getpwnam(plan.user)
    except KeyError:
        return None
    return (entry.pw_uid, entry.pw_gid) if os.geteuid() == 0 else None


def _write(path: Path, text: str, mode: int, done: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    path.chmod(mode)
    done.append(f"wrote {path} (mode {mode:04o})")


def _system_user(plan: Plan, done: list[str]) -> None:
    """The service user and the socket group, created when missing (only without --root)."""
    commands = []
    try:
        grp.getgrnam(plan.group)
    except KeyError:
        commands.append(["groupadd", "--system", plan.group])
    try:
        pwd.getpwnam(plan.user)
    except KeyError:
        commands.append(["useradd", "--system", "--user-group", "--home-dir", str(plan.state_dir),
                         "--shell", "/usr/sbin/nologin", plan.user])
    for argv in commands:
        if not plan.dry_run:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise UsageError(f"{shlex.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[:500]}")
        done.append(("would run " if plan.dry_run else "ran ") + shlex.join(argv))


def _key(plan: Plan, owner: tuple[int, int] | None, done: list[str]) -> str:
    """The key in the config folder, readable by the service user alone; the public line."""
    folder, key = plan.at(plan.config_dir), plan.at(plan.key)
    if plan.dry_run:
        what = f"move {plan.key_from} to" if plan.key_from else ("keep" if key.exists() else "create")
        done.append(f"would {what} {key} (mode 0600, owner {plan.user})")
        return keys.public_line(keys.load_private(key).public_key()) if key.exists() else ""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    if plan.key_from is not None:
        if key.exists():
            raise UsageError(f"--key-from: {key} already exists; a runner key is never overwritten")
        private = keys.load_private(plan.key_from)
        data = plan.key_from.read_bytes()
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        plan.key_from.unlink()
        done.append(f"moved {plan.key_from} to {key} (the old file is removed)")
    elif key.exists():
        private = keys.load_private(key)
        done.append(f"kept {key}")
    else:
        keys.create(key)
        private = keys.load_private(key)
        done.append(f"created {key}")
    key.chmod(0o600)
    if owner is not None:
        for path in (folder, key):
            os.chown(path, *owner, follow_symlinks=False)
        done.append(f"{folder} (0700) and {key} (0600) belong to {plan.user}")
    else:
        done.append(f"NOT given to {plan.user}: that needs root and an existing user {plan.user}; until then the "
                    "key belongs to the user who ran this")
    return keys.public_line(private.public_key())


def install(plan: Plan) -> int:
    from ds4ci.service.checkout import trusted_source

    trusted_source(plan.trusted_repo, plan.trusted_branch)
    for name in plan.runners:
        runner_name(name, "--runner")
    if not plan.runners:
        raise UsageError("--runner: expected at least one runner name (the [runners.<name>] the service gates for)")
    for path in (plan.socket, plan.config_dir, plan.state_dir):
        if not path.is_absolute():
            raise UsageError(f"expected an absolute path, found {path}")
    if plan.root is None and not plan.dry_run and os.geteuid() != 0:
        raise UsageError("service install changes the system: run it as root, or give --root DIR (a staged copy) "
                         "or --dry-run")
    done: list[str] = []
    allowed = {0} | ({pwd.getpwnam(plan.user).pw_uid} if _known(plan.user) else set())
    unsafe = writable_by_others(install_paths(), allowed)
    if unsafe:
        said = "; ".join(unsafe[:5]) + (f"; and {len(unsafe) - 5} more" if len(unsafe) > 5 else "")
        message = (f"the service would run this ds4ci install with the key, but others could change it: {said}; "
                   "install ds4ci where only root can write (e.g. a root-owned venv under /opt)")
        if plan.root is None and not plan.dry_run:
            raise UsageError(message)
        done.append("WARNING (a real install refuses this): " + message)
    if plan.root is None:
        _system_user(plan, done)
    owner = _owner(plan)
    python = str(Path(sys.executable).absolute())
    files = [(plan.at(Path(f"/etc/systemd/system/{UNIT}.socket")), socket_unit(plan)),
             (plan.at(Path(f"/etc/systemd/system/{UNIT}.service")), service_unit(plan, python)),
             (plan.at(Path(f"/etc/tmpfiles.d/{UNIT}.conf")), tmpfiles(plan))]
    for path, text in files:
        if plan.dry_run:
            done.append(f"would write {path}:\n" + "".join(f"    {line}\n" for line in text.splitlines()))
        else:
            _write(path, text, 0o644, done)
    if not plan.dry_run:
        state = plan.at(plan.state_dir)
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.chmod(0o700)
        if owner is not None:
            os.chown(state, *owner)
        done.append(f"made {state} (0700)")
    line = _key(plan, owner, done)
    for entry in done:
        print(entry)
    if line:
        print("add to the trusted ds4ci.toml, under each of these runners' [runners.<name>] tables:")
        print(f'public_key = "{line}"')
    else:
        print("the install makes the key and prints its public_key line for the trusted ds4ci.toml")
    if plan.root is None:
        print(f"then: systemctl daemon-reload && systemd-tmpfiles --create && systemctl enable --now {UNIT}.socket")
        print(f"and let the runner's user connect: usermod -aG {plan.group} RUNNER_USER (then restart the runner)")
    return EXIT_PASS


def _known(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True

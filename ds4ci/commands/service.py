"""``ds4ci service install|run|request``: the runner-side gate service (docs/service.md), Typer wiring only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ds4ci.commands.finish import exit_with

DEFAULT_SOCKET = Path("/run/ds4ci/gate.sock")
DEFAULT_CONFIG_DIR = Path("/etc/ds4ci")
DEFAULT_STATE_DIR = Path("/var/lib/ds4ci")

service_app = typer.Typer(
    help="The runner-side gate service: the runner key out of every job's reach (docs/service.md). "
    "Exit codes: install 0 written, 2 refused; run 0 stopped cleanly, 2 usage, 3 cannot serve; "
    "request: the gate's (0 pass, 1 fail, 2 refused request, 3 no verdict or busy).",
    no_args_is_help=True,
)

_RUNNER_HELP = "A runner name the service gates for (one queue each); repeat for several."
_TRUSTED_REPO_HELP = ("Required: the repository (path or URL the service user can fetch) whose --trusted-branch holds "
                      "the gate's config; every request's base must be a commit of that branch.")
_TRUSTED_BRANCH_HELP = "The trusted branch of --trusted-repo: its tip's config is the one every gate runs with."


@service_app.command("install")
def install(
    runner: Annotated[list[str], typer.Option("--runner", metavar="NAME", help=_RUNNER_HELP)],
    user: Annotated[str, typer.Option(help="The service's own system user (created when missing).")] = "ds4ci",
    socket_group: Annotated[str, typer.Option(help="Group of the socket: add the runner's user to it.")] = "ds4ci-gate",
    socket: Annotated[Path, typer.Option(help="Where systemd makes the service's socket.")] = DEFAULT_SOCKET,
    config_dir: Annotated[Path, typer.Option(help="Folder of the runner key (mode 0700, the service user's).")]
    = DEFAULT_CONFIG_DIR,
    state_dir: Annotated[Path, typer.Option(help="The service's evidence, request records and private checkouts.")]
    = DEFAULT_STATE_DIR,
    trusted_repo: Annotated[str | None, typer.Option(help=_TRUSTED_REPO_HELP)] = None,
    trusted_branch: Annotated[str, typer.Option(help=_TRUSTED_BRANCH_HELP)] = "main",
    key_from: Annotated[Path | None, typer.Option(help="Move this existing runner key (e.g. the runner user's "
                                                       "~/.config/ds4ci/runner-key.pem) into --config-dir.")] = None,
    root: Annotated[Path | None, typer.Option(help="Write every file under this folder instead of / (a staged copy "
                                                   "or a test); creates no user, runs nothing.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be done; write nothing.")] = False,
) -> None:
    """Install the gate service: systemd socket and service units, a tmpfiles entry, the runner key.

    The key ends up in --config-dir, mode 0600, readable by the service user only; the public key line
    to put in the trusted ds4ci.toml is printed. Nothing is started: the systemctl commands are printed.
    Exit codes: 0 written, 2 refused (no --trusted-repo, not root without --root, a bad name, an install of
    ds4ci others could change, a key that exists where --key-from would put one).
    """
    from ds4ci.service.install import Plan
    from ds4ci.service.install import install as run_install

    plan = Plan(user=user, group=socket_group, socket=socket, config_dir=config_dir, state_dir=state_dir,
                runners=tuple(runner), trusted_repo=trusted_repo, trusted_branch=trusted_branch, key_from=key_from,
                root=root, dry_run=dry_run)
    exit_with(lambda: run_install(plan))


@service_app.command("run")
def run(
    runner: Annotated[list[str], typer.Option("--runner", metavar="NAME", help=_RUNNER_HELP)],
    socket: Annotated[Path | None, typer.Option(help="Listen here (mode 0660) unless systemd passed a socket.")]
    = None,
    socket_group: Annotated[str | None, typer.Option(help="Give the socket this group (the runner user's).")] = None,
    state_dir: Annotated[Path, typer.Option(help="Evidence, request records, private checkouts (mode 0700).")]
    = DEFAULT_STATE_DIR,
    signing_key: Annotated[Path, typer.Option(help="The runner key: mode 0600, this user's.")]
    = DEFAULT_CONFIG_DIR / "runner-key.pem",
    config_path: Annotated[str, typer.Option(help="The gate's config inside the repository, read from the tip of "
                                                  "--trusted-branch.")] = "ds4ci.toml",
    trusted_repo: Annotated[str | None, typer.Option(help=_TRUSTED_REPO_HELP)] = None,
    trusted_branch: Annotated[str, typer.Option(help=_TRUSTED_BRANCH_HELP)] = "main",
    queue_depth: Annotated[int, typer.Option(min=1, max=1000, help="Requests that may wait per runner; more are "
                                                                   "answered busy.")] = 8,
    max_connections: Annotated[int, typer.Option(min=1, max=10000, help="Open connections at most.")] = 64,
    gate_timeout: Annotated[float, typer.Option(min=60, help="Seconds one gate may run before it is stopped.")]
    = 3 * 3600.0,
    keep_work: Annotated[bool, typer.Option("--keep-work", help="Keep each private checkout (debugging).")] = False,
) -> None:
    """Serve gate requests on a Unix socket until SIGTERM (see docs/service.md).

    Each request names a repository to fetch the head from, head and base SHAs, a runner and widths; the
    service checks the head out privately, reads the config from the tip of --trusted-branch of
    --trusted-repo (required), runs the gate with the sandbox required, signs with --signing-key and
    streams the bundle and results back. Exit codes: 0 stopped cleanly, 2 usage (no --trusted-repo, a
    bad key, socket or state folder), 3 cannot serve (no sandbox here).
    """
    from ds4ci.options.values import runner_name
    from ds4ci.service.checkout import trusted_source
    from ds4ci.service.job import Settings
    from ds4ci.service.server import serve

    def go() -> int:
        names = [runner_name(name, "--runner") for name in runner]
        settings = Settings(state_dir=state_dir.absolute(), signing_key=signing_key.absolute(),
                            trusted=trusted_source(trusted_repo, trusted_branch), config_path=config_path,
                            gate_timeout_s=gate_timeout, keep_work=keep_work)
        return serve(settings, names, socket, socket_group, queue_depth, max_connections)

    exit_with(go)


@service_app.command("request")
def request(
    checkout: Annotated[Path, typer.Option(help="The git repository to fetch the commits from (the job's checkout).")],
    head: Annotated[str, typer.Option(help="The pinned head: a full commit SHA.")],
    base: Annotated[str, typer.Option(help="The pull request's base: a full SHA of a commit of the service's trusted "
                                           "branch (recorded; the config comes from that branch's tip).")],
    runner: Annotated[str, typer.Option(metavar="NAME", help="The runner (its queue and [runners.<name>] settings).")],
    bundle_out: Annotated[Path, typer.Option(help="Write the signed evidence bundle (.tar.gz) here (a new file).")],
    results_out: Annotated[Path, typer.Option(help="Write results.json here (a new file).")],
    socket: Annotated[Path, typer.Option(help="The service's socket.")] = DEFAULT_SOCKET,
    widths: Annotated[str | None, typer.Option(metavar="Q,Q", help="Comma-separated draft widths; default the config's.")] = None,
    max_bundle_mib: Annotated[int, typer.Option(min=1, help="Refuse a bundle larger than this.")] = 4096,
) -> None:
    """Ask the gate service to gate one commit; write its bundle and results; exit with the gate's code.

    The request waits its turn on the runner's queue (a full queue is "busy"). Exit codes: 0 pass,
    1 fail, 2 usage or a request the service refused (or the gate's own 2), 3 no verdict (busy,
    the service unreachable, a broken answer, or the gate's own 3).
    """
    from ds4ci.service.client import request as run_request

    exit_with(lambda: run_request(socket, checkout, head, base, runner, widths, bundle_out, results_out,
                                  max_bundle_mib))

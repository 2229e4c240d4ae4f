"""``ds4ci init``: a starter ``ds4ci.toml`` with real pins, a ``.gitignore`` entry, and the workflows.

Pins are computed from the files named (``--target``, ``--draft``, ``--prompt-file``, ``--server-bin``);
a file that is not on this machine gets a placeholder that every command explains
(``values.PIN_PLACEHOLDER``; ``ds4ci pin`` fills them later). The server is built from the pull
request's head by default: a ``[build]`` from the repository's CMake files (``buildguess``) or
``--build-command``; ``--prebuilt`` names an existing ``gate.server_bin`` instead, never both.
``--simulator`` writes tiny model and prompt files and ``gate.server = "simulator"`` (ds4ci's bundled
simulator), so ``ds4ci gate`` runs here without a GPU (the simulator's paths are absolute: its files are
this machine's, so the workflows run them too when ``act`` runs them here). ``[merge]`` requires each
runner's status. The workflow is a short ``gate.yml`` that calls ds4ci's own (``caller``), pinned to
``--ds4ci-ref``; ``--copy-workflows`` writes full copies of the ones this ds4ci ships (``gate.yml``,
``report.yml``) instead, with one line filled in: ``DS4CI_REF``, the ds4ci they install and whose action
they use. Without ``--ds4ci-ref`` the pins are placeholders that ``config check`` and ``preflight`` point out.
Nothing is overwritten without ``--force``, and ``--force`` never drops a key of ``ds4ci.toml`` that init did not
write (``initkeep``); ``ds4ci upgrade`` moves the workflows alone.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ds4ci.commands import caller, checklist, initkeep, repofiles
from ds4ci.commands.buildguess import BuildGuess, guess
from ds4ci.commands.demo import DEMO_PROMPT
from ds4ci.commands.repofiles import build_folder
from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.options import table
from ds4ci.options.runners import default_labels
from ds4ci.options.values import DS4CI_REF_PLACEHOLDER, PIN_PLACEHOLDER, ds4ci_ref, runner_name

CONFIG_NAME = "ds4ci.toml"
SIM_DIR = "ds4ci-sim"
WORKFLOWS = ("gate.yml", "report.yml")
# The one line of each shipped workflow that names the ds4ci it runs: empty in ds4ci's own repository.
REF_LINE = '  DS4CI_REF: ""'
_GFX = re.compile(r"^gfx\d+[a-z]?$", re.IGNORECASE)
_SM = re.compile(r"^sm_?(\d{2,3})$", re.IGNORECASE)


@dataclass
class InitRequest:
    directory: Path
    runners: list[str] = field(default_factory=list)
    simulator: bool = False
    server_bin: Path | None = None
    target: Path | None = None
    draft: Path | None = None
    prompts: list[Path] = field(default_factory=list)
    workflows: bool = True
    copy_workflows: bool = False  # full copies of gate.yml and report.yml, not the short caller of ds4ci's own
    force: bool = False
    ds4ci_ref: str | None = None  # OWNER/NAME@REF written into the workflows; None: the placeholder
    build_command: str | None = None  # [build].command; None: guessed from CMake files (buildguess)
    prebuilt: bool = False  # gate.server_bin (an existing binary) instead of [build]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pin(path: Path | None) -> str:
    """The file's SHA-256, or the placeholder when it is not readable here (a model staged on the runner only)."""
    if path is None or not path.is_file():
        return PIN_PLACEHOLDER
    return _sha256(path)


def _runner_table(name: str, simulator: bool) -> list[str]:
    """``[runners.<name>]``: device and expected GPU guessed from names like gfx1151 or sm86."""
    lines = [f"[runners.{name}]", f"labels = {json.dumps(list(default_labels(name)))}   # the gate job's runs-on"]
    gfx, sm = _GFX.match(name), _SM.match(name)
    if gfx or sm:
        lines.append(f'target_device = "{"hip:0" if gfx else "cuda:0"}"')
    elif simulator:
        lines.append('target_device = "cpu:0"   # the simulator needs no GPU; on a real runner: "hip:0" or "cuda:0"')
    else:
        default = table.get("gate", "target_device").default
        lines.append(f'target_device = "{default}"   # the name {name!r} says no GPU kind: "hip:0" (AMD) or "cuda:0" '
                     "(NVIDIA)")
    gpu = name.lower() if gfx else f"sm_{sm.group(1)}" if sm else None
    if gpu is not None:
        note = "  # the simulator needs no GPU: uncomment on the real runner" if simulator else ""
        lines.append(f'{"# " if simulator else ""}gpu = "{gpu}"{note}')
    else:
        lines.append('# gpu = "gfx1151"   # the GPU this runner must have (preflight and the gate check it)')
    return [*lines, ""]


def _simulator_files(req: InitRequest) -> tuple[Path, Path, list[Path]]:
    """(target, draft, prompts): tiny files for the bundled simulator, in ds4ci-sim/."""
    sim = req.directory / SIM_DIR
    sim.mkdir(parents=True, exist_ok=True)
    target, draft, prompt = sim / "target.gguf", sim / "draft.gguf", sim / "prompt.txt"
    target.write_bytes(b"GGUF ds4ci-sim target " + bytes(range(256)) * 64)
    draft.write_bytes(b"GGUF ds4ci-sim draft " + bytes(reversed(range(256))) * 16)
    prompt.write_text(DEMO_PROMPT, encoding="utf-8")
    return target, draft, [prompt]


def _files(req: InitRequest) -> tuple[Path | None, Path | None, list[Path]]:
    """(target, draft, prompts): the simulator's own files with --simulator, else the ones named."""
    return _simulator_files(req) if req.simulator else (req.target, req.draft, req.prompts)


def _build(req: InitRequest) -> BuildGuess | None:
    """The ``[build]`` to write: the command named or guessed; None with --prebuilt, or with --simulator
    when the repository has no CMake project and no command is named (the simulator then needs no build)."""
    if req.prebuilt:
        return None
    found = guess(req.directory)
    if req.simulator and req.build_command is None and found.found.startswith("no "):
        return None
    command = req.build_command if req.build_command is not None else found.command
    server = str(req.server_bin) if req.server_bin is not None else found.server_bin
    return BuildGuess(command, server, "--build-command" if req.build_command is not None else found.found)


def _build_lines(build: BuildGuess | None, simulator: bool) -> list[str]:
    if build is None:
        return []
    stand_in = ("# With gate.server = \"simulator\" the build still runs (the PR must build) and the simulator\n"
                "# stands in for the binary it makes.\n" if simulator else "")
    return [
        "# The server under test is built from the pull request's head before the gate runs (one of [build] or a",
        "# prebuilt gate.server_bin, never both: `ds4ci init --prebuilt` writes the other).",
        f"# The command comes from {build.found}.",
        *stand_in.splitlines(),
        "[build]",
        f"command = {json.dumps(build.command)}",
        f"server_bin = {json.dumps(build.server_bin)}   # what the command makes: hashed, recorded and started",
        "",
    ]


def _merge_lines(runners: list[str]) -> list[str]:
    return [
        "# What `ds4ci merge-check --pr N` requires on the PR's exact head (docs/merging.md).",
        "[merge]",
        f"runners = {json.dumps(runners)}   # their ds4ci/<runner> status must be success",
        f"approvals = {table.get('merge', 'approvals').default}",
        "",
    ]


def _rel(path: Path | None, base: Path, fallback: str, absolute: bool = False) -> str:
    """A TOML string: the path (given relative to the working directory) relative to the config file when it lies
    below it, else (or with ``absolute``) absolute; ``fallback`` (a path for the runner, e.g. under
    ${DS4_MODEL_DIR}) when none is given."""
    if path is None:
        return json.dumps(fallback)
    if absolute:
        return json.dumps(str(path.absolute()))
    try:
        return json.dumps(str(path.absolute().relative_to(base.absolute())))
    except ValueError:
        return json.dumps(str(path.absolute()))


def _server_lines(req: InitRequest, build: BuildGuess | None, base: Path) -> list[str]:
    if req.simulator:
        return ['server = "simulator"   # ds4ci\'s bundled simulator: no GPU, no server binary (a first run)']
    if build is not None:
        return []
    return [f'server_bin = {_rel(req.server_bin, base, "build/bin/dflash_server")}   # prebuilt: not built from the PR',
            f'server_sha256 = "{_pin(req.server_bin)}"']


def config_text(req: InitRequest) -> str:
    target, draft, prompts = _files(req)
    build = _build(req)
    base, here = req.directory, req.simulator
    evidence = table.DEFAULT_EVIDENCE_DIR
    prompt_lines = [
        f'  {{ file = {_rel(p, base, "", here)}, sha256 = "{_pin(p)}" }},' for p in prompts
    ] or [f'  {{ file = "ci/ds4/prompt-1.txt", sha256 = "{PIN_PLACEHOLDER}" }},']
    where = ("# The simulator's files are named by absolute paths: they are this machine's (ds4ci-sim/, ignored by git),"
             "\n# for `ds4ci gate` here and for the workflows when `act` runs them here." if here else
             "# Paths are relative to this file.")
    lines = [
        "# ds4ci.toml, written by `ds4ci init` (every key: docs/configuration.md; check it: `ds4ci config check`).",
        where,
        "# A pin that says TODO is a file ds4ci could not read here: put its SHA-256 there",
        "# (`sha256sum FILE`), or run `ds4ci pin` where the file is (it rewrites the pins only).",
        "",
        *_build_lines(build, req.simulator),
        "[gate]",
        *_server_lines(req, build, base),
        f'target = {_rel(target, base, "${DS4_MODEL_DIR}/target.gguf", here)}',
        f'target_sha256 = "{_pin(target)}"',
        f'draft = {_rel(draft, base, "${DS4_MODEL_DIR}/draft.gguf", here)}',
        f'draft_sha256 = "{_pin(draft)}"',
        "prompts = [", *prompt_lines, "]",
        f"widths = {list(table.DEFAULT_WIDTHS)}",
        f'evidence_dir = "{evidence}"   # ignored by git (.gitignore); the action uses $RUNNER_TEMP instead',
        "",
        *_merge_lines(req.runners),
    ]
    for name in req.runners:
        lines += _runner_table(name, req.simulator)
    return "\n".join(lines)


def workflow_source(name: str) -> Path:
    """A workflow as this ds4ci ships it: in the wheel (ds4ci/workflows), else the repository's .github/workflows."""
    packaged = Path(__file__).resolve().parents[1] / "workflows" / name
    if packaged.is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / ".github" / "workflows" / name
    if checkout.is_file():
        return checkout
    raise UsageError(f"this ds4ci installation has no {name} (expected {packaged}); reinstall ds4ci, or pass --no-workflows")


def render_workflow(source: Path, ref: str | None) -> str:
    """The shipped workflow with its ``DS4CI_REF`` line set to ``ref`` (OWNER/NAME@REF), else the placeholder."""
    text = source.read_text(encoding="utf-8")
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if line == REF_LINE]
    if len(at) != 1:
        raise UsageError(f"{source}: expected one line {REF_LINE.strip()!r} (the ds4ci the workflow runs), found "
                         f"{len(at)}; reinstall ds4ci, or pass --no-workflows")
    lines[at[0]] = f"  DS4CI_REF: {json.dumps(ref if ref is not None else DS4CI_REF_PLACEHOLDER)}"
    return "\n".join(lines)


def _workflows(req: InitRequest) -> dict[Path, str]:
    """The workflow files init writes and their text: the caller of ds4ci's gate workflow, or full copies."""
    folder = req.directory / ".github" / "workflows"
    if not req.workflows:
        return {}
    if not req.copy_workflows:
        return {folder / caller.NAME: caller.render(req.ds4ci_ref)}
    return {folder / n: render_workflow(workflow_source(n), req.ds4ci_ref) for n in WORKFLOWS}


def _write_new(path: Path, text: str, force: bool, written: list[str]) -> None:
    if path.exists() and not force:
        raise UsageError(f"{path} exists; keep it, or pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    written.append(str(path))


def _ignored_entries(req: InitRequest, build: BuildGuess | None) -> list[str]:
    """What .gitignore gets: the evidence folder, the simulator's files, the folder the build writes (which
    must hold nothing git tracks)."""
    entries = [f"{table.DEFAULT_EVIDENCE_DIR}/", *([f"{SIM_DIR}/"] if req.simulator else [])]
    folder = build_folder(build.server_bin) if build is not None else None
    if folder is not None:
        repofiles.refuse_tracked_build_folder(req.directory, folder)
        entries.append(folder)
    return entries


def run_init(req: InitRequest) -> int:
    for name in req.runners:
        runner_name(name, "--runner")
    if req.ds4ci_ref is not None:
        ds4ci_ref(req.ds4ci_ref, "--ds4ci-ref")
        if not req.workflows:
            raise UsageError("--ds4ci-ref names the ds4ci the workflows run; it has no use with --no-workflows")
    if req.copy_workflows and not req.workflows:
        raise UsageError("--copy-workflows and --no-workflows disagree: keep one")
    if len(set(req.runners)) != len(req.runners):
        raise UsageError(f"--runner: a runner is named twice in {req.runners}")
    if req.simulator and (req.target or req.draft or req.prompts or req.prebuilt):
        raise UsageError("--simulator writes its own model and prompt files and runs ds4ci's simulator; leave out "
                         "--prebuilt, --target, --draft and --prompt-file")
    if req.prebuilt and req.build_command is not None:
        raise UsageError("--prebuilt (an existing gate.server_bin) and --build-command ([build]) are the two ways to "
                         "name the server; keep one")
    if req.simulator and req.server_bin is not None and req.build_command is None:
        raise UsageError("--server-bin with --simulator names what --build-command makes; name the command too")
    config = req.directory / CONFIG_NAME
    flows = _workflows(req)
    present = [str(p) for p in (config, *flows) if p.exists()]
    if present and not req.force:  # checked before anything is written: never half an init
        raise UsageError(f"{', '.join(present)} already exist(s); keep them, or pass --force to overwrite")
    ignored = _ignored_entries(req, _build(req))
    req.directory.mkdir(parents=True, exist_ok=True)
    text = initkeep.stamped(config_text(req), CONFIG_NAME)
    initkeep.refuse_discarding(config, text)
    written: list[str] = []
    _write_new(config, text, True, written)
    repofiles.ignore(req.directory, ignored, written)
    for path, text in flows.items():
        _write_new(path, text, True, written)
    print("wrote:\n" + "\n".join(f"  {w}" for w in written))
    if flows and req.ds4ci_ref is None:
        what = "DS4CI_REF" if req.copy_workflows else "the uses: and ds4ci-ref lines"
        print(f"placeholder: {what} in {', '.join(str(p) for p in flows)} name(s) the ds4ci the workflows run; "
              "set it to ds4ci's repository and a tag or commit (OWNER/NAME@v0.1.0): run "
              "`ds4ci upgrade --ds4ci-ref OWNER/NAME@REF` (it never touches ds4ci.toml)")
    named = f" --config {config}" if req.directory.absolute() != Path.cwd() else ""
    gates = [f"ds4ci gate{named} --runner {r}" for r in req.runners] or [f"ds4ci gate{named}"]
    print("\n      ".join([f"next: ds4ci config check{named}", *gates]), file=sys.stdout)
    if req.runners and not req.simulator:
        print(service_steps(req.runners), file=sys.stdout)
    if flows:
        print("\n" + checklist.text(), end="", file=sys.stdout)
    return EXIT_PASS


def service_steps(runners: list[str]) -> str:
    """How each runner keeps its key out of every job's reach: the gate service (docs/service.md)."""
    flags = " ".join(f"--runner {name}" for name in runners)
    return ("on each runner, as root: the gate service holds the runner key where no job can read it (docs/service.md; "
            "under GitHub Actions a gate refuses a key its job can read unless its runner table says "
            'signing = "job-key"):\n'
            f"      sudo ds4ci service install {flags} --trusted-repo https://github.com/OWNER/REPO.git "
            "--trusted-branch main\n"
            "      then the repository variable DS4CI_SERVICE_SOCKET=/run/ds4ci/gate.sock (the gate job asks the service)")

"""Loading ``ds4ci.toml`` plus CLI overrides into one validated, frozen ``GateConfig``.

Paths in the file are relative to the file's directory and may use ``${VAR}`` (for example a
model directory that a workflow takes from a repository variable); an unset variable is an
error, never an empty string.
"""

from __future__ import annotations

import math
import os
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options.policy import ENV_PREFIXES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

DEFAULT_STALE_OVERRIDE_FILES = ("/tmp/ds4_spec_q", "/tmp/ds4_awidth")  # noqa: S108 - the server reads these
# Arguments that depend on the device kind: --ds4-fused-decode exists only for single-device HIP
# DeepSeek4; a CUDA server refuses it and exits 2 before listening.
HIP_DEVICE_ARGS = ("--ds4-fused-decode", "--ds4-prefill", "exact")
OTHER_DEVICE_ARGS = ("--ds4-prefill", "exact")
# ds4ci sets these itself on every server; server_args may not repeat them.
OWNED_SERVER_FLAGS = ("--host", "--port", "--max-ctx", "--chunk", "--target-device")
MAX_SECONDS = 7 * 24 * 3600.0
MAX_SEED = 2**64 - 1  # the server reads seed as uint64
DEFAULT_WIDTHS = (2, 3, 4)
FULL, FOCUSED = "full", "focused"
CHECK_PARSERS = ("junit", "ctest", "build-progress", "compute-sanitizer", "exit-code")
RUNNER_ROLES = ("gate", "negative-control")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_RUNNER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class PinnedFile:
    role: str
    path: Path
    sha256: str | None


@dataclass(frozen=True)
class CheckSpec:
    """One extra check from ``[[checks]]``: a shell command and how to read its outcome."""

    name: str
    command: str
    parser: str
    report: Path | None = None  # JUnit XML file the command writes (parser "junit")
    timeout_s: float = 3600.0
    cwd: Path | None = None


@dataclass(frozen=True)
class BuildSpec:
    """``[build]``: how the server under test is built before the gate hashes and runs it."""

    command: str
    cwd: Path | None
    timeout_s: float
    server_bin: Path  # the binary the build produces: the one hashed, recorded and started


@dataclass(frozen=True)
class GateConfig:
    server_bin: PinnedFile
    target: PinnedFile
    draft: PinnedFile
    prompts: tuple[PinnedFile, ...]
    evidence_dir: Path
    results_out: Path | None
    runner: str
    role: str
    negative_control_for: str | None
    widths: tuple[int, ...]
    max_tokens: int
    seed: int
    repeats: int
    target_device: str
    max_ctx: int
    chunk: int
    mmvq_max_ncols: int
    startup_timeout_s: float
    request_timeout_s: float
    stop_timeout_s: float
    hash_cache: bool
    hash_cache_path: Path | None
    stale_override_files: tuple[Path, ...]
    device_args: tuple[str, ...] = OTHER_DEVICE_ARGS
    server_args: tuple[str, ...] = ()
    env_prefixes: tuple[str, ...] = ENV_PREFIXES
    log_cap_mib: int = 512
    checks: tuple[CheckSpec, ...] = ()
    source_dir: Path | None = None
    base_ref: str | None = None
    upstream_ref: str | None = None
    config_file: Path | None = None
    bundle_out: Path | None = None
    notes: tuple[str, ...] = ()  # reviewer notes from the caller (CLI only), recorded as warnings
    build: BuildSpec | None = None
    configured_widths: tuple[int, ...] = DEFAULT_WIDTHS

    @property
    def scope(self) -> str:
        """``full`` when this run proves every configured width, else ``focused`` (a focused rerun)."""
        return FULL if set(self.widths) >= set(self.configured_widths) else FOCUSED

    @property
    def log_cap_bytes(self) -> int:
        return self.log_cap_mib << 20

    def server_args_all(self) -> tuple[str, ...]:
        """Every argument after the ones ds4ci owns: the device defaults (or their replacement), then extras."""
        return (*self.device_args, *self.server_args)


def _notes(value: Any) -> tuple[str, ...]:
    notes = _strings(value, "--note") if value else ()
    if any(len(n) > 2000 or "\n" in n for n in notes):
        raise UsageError("--note: expected one line of at most 2000 characters each")
    return notes


def under_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def default_device_args(target_device: str) -> tuple[str, ...]:
    return HIP_DEVICE_ARGS if target_device.startswith("hip:") else OTHER_DEVICE_ARGS


_GATE_KEYS = {
    "server_bin", "server_sha256", "target", "target_sha256", "draft", "draft_sha256", "prompts",
    "evidence_dir", "results_out", "runner", "widths", "max_tokens", "seed", "repeats", "target_device",
    "max_ctx", "chunk", "mmvq_max_ncols", "startup_timeout", "request_timeout", "stop_timeout",
    "hash_cache", "hash_cache_path", "stale_override_files", "source_dir", "base_ref", "upstream_ref",
    "device_args", "server_args", "env_prefixes", "log_cap_mib", "bundle_out",
}
# [merge] is read by ds4ci.github.merge, [preflight] by ds4ci.runner.busy.
_TOP_KEYS = {"gate", "runner", "runners", "checks", "merge", "preflight", "build"}
_RUNNER_KEYS = {"name", "role", "negative_control_for"}
_CHECK_KEYS = {"name", "command", "parser", "report", "timeout", "cwd"}
_BUILD_KEYS = {"command", "cwd", "timeout", "server_bin"}
DEFAULT_BUILD_TIMEOUT_S = 4 * 3600.0


def read_toml(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise UsageError(f"config file {path} is a directory; expected a ds4ci.toml file")
    try:
        with path.open("rb") as fh:
            loaded: dict[str, Any] = tomllib.load(fh)
            return loaded
    except FileNotFoundError as exc:
        raise UsageError(f"config file {path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from exc


def _unknown(keys: Sequence[str] | Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(keys) - allowed)
    if extra:
        raise UsageError(f"{where}: unknown key(s) {', '.join(extra)}; expected only {', '.join(sorted(allowed))}")


def expand_vars(text: str, where: str) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        value = os.environ.get(name)
        if not value:
            raise UsageError(f"{where}: ${{{name}}} is used but the environment variable {name} is not set")
        return value

    return _VAR.sub(repl, text)


def _path(value: Any, where: str, base: Path | None) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: expected a path string, found {value!r}")
    path = Path(expand_vars(value, where)).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return path


def parse_sha256(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _HEX64.match(value.strip().lower()):
        raise UsageError(f"{where}: expected 64 hexadecimal characters (a SHA-256), found {value!r}")
    return value.strip().lower()


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where}: expected an integer, found {value!r}")
    if value < minimum:
        raise UsageError(f"{where}: expected an integer >= {minimum}, found {value}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{where}: expected a positive, finite number of seconds, found {value!r}")
    if value > MAX_SECONDS:
        raise UsageError(f"{where}: expected at most {MAX_SECONDS:g} seconds (7 days), found {value!r}")
    return float(value)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{where}: expected a list of non-empty strings, found {value!r}")
    return tuple(value)


def _server_args(value: Any, where: str) -> tuple[str, ...]:
    args = _strings(value, where)
    owned = [a for a in args if a.split("=", 1)[0] in OWNED_SERVER_FLAGS]
    if owned:
        raise UsageError(
            f"{where}: {', '.join(owned)} is set by ds4ci itself (from target, max_ctx, chunk, target_device); "
            "remove it from the extra arguments"
        )
    return args


def _env_prefixes(value: Any) -> tuple[str, ...]:
    prefixes = _strings(value, "env_prefixes")
    wrong = [p for p in prefixes if p not in ENV_PREFIXES]
    if wrong or not prefixes or len(set(prefixes)) != len(prefixes):
        raise UsageError(
            f"env_prefixes: expected one or both of {', '.join(ENV_PREFIXES)} (each once), found {list(prefixes)}"
        )
    return prefixes


def _nonempty_prompts(prompts: Sequence[PinnedFile]) -> None:
    """An empty or whitespace-only prompt proves nothing: refuse it before any work."""
    for prompt in prompts:
        try:
            data = prompt.path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{prompt.role} file {prompt.path} cannot be read: {exc.strerror or exc}") from exc
        if not data.strip():
            raise UsageError(f"{prompt.role} file {prompt.path} is empty or whitespace only; a prompt needs text")


def parse_widths(value: Any, where: str = "widths") -> tuple[int, ...]:
    items: list[Any]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
        if any(not part for part in items):
            raise UsageError(f"{where}: expected comma-separated integers like 2,3,4, found {value!r}")
        try:
            items = [int(part) for part in items]
        except ValueError as exc:
            raise UsageError(f"{where}: expected comma-separated integers like 2,3,4, found {value!r}") from exc
    elif isinstance(value, list):
        items = value
    else:
        raise UsageError(f"{where}: expected a list of integers, found {value!r}")
    widths = tuple(_int(item, where, 2) for item in items)
    if not widths:
        raise UsageError(f"{where}: expected at least one width")
    if len(set(widths)) != len(widths):
        raise UsageError(f"{where}: width listed twice in {list(widths)}; each width is proven once")
    if max(widths) > 64:
        raise UsageError(f"{where}: widths above 64 are not supported, found {max(widths)}")
    return widths


def _prompts(
    file_section: Any, cli_files: Sequence[Path] | None, cli_shas: Sequence[str] | None, base: Path | None
) -> tuple[PinnedFile, ...]:
    if cli_files or cli_shas:
        files, shas = list(cli_files or []), list(cli_shas or [])
        if len(files) != len(shas):
            raise UsageError(
                f"--prompt-file and --prompt-sha256 are paired in order: found {len(files)} file(s) "
                f"and {len(shas)} SHA-256 value(s)"
            )
        return tuple(
            PinnedFile(f"prompt{i}", _path(f, f"--prompt-file #{i + 1}", None), parse_sha256(s, f"--prompt-sha256 #{i + 1}"))
            for i, (f, s) in enumerate(zip(files, shas, strict=True))
        )
    if file_section is None:
        return ()
    if not isinstance(file_section, list):
        raise UsageError("gate.prompts: expected an array of tables like {file = \"p.txt\", sha256 = \"...\"}")
    out = []
    for i, item in enumerate(file_section):
        where = f"gate.prompts[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected a table with keys file and sha256, found {item!r}")
        _unknown(item, {"file", "sha256"}, where)
        path = _path(item.get("file"), f"{where}.file", base)
        out.append(PinnedFile(f"prompt{i}", path, parse_sha256(item.get("sha256"), where)))
    return tuple(out)


def _checks(section: Any, base: Path | None) -> tuple[CheckSpec, ...]:
    if section is None:
        return ()
    if not isinstance(section, list):
        raise UsageError("checks: expected [[checks]] tables")
    names: set[str] = set()
    out = []
    for i, item in enumerate(section):
        where = f"checks[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected a table")
        _unknown(item, _CHECK_KEYS, where)
        name, command, parser = item.get("name"), item.get("command"), item.get("parser", "exit-code")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{where}.name: expected a non-empty string")
        if name in names:
            raise UsageError(f"{where}.name: check {name!r} is declared twice")
        names.add(name)
        if not isinstance(command, str) or not command.strip():
            raise UsageError(f"{where}.command: expected a non-empty shell command")
        if parser not in CHECK_PARSERS:
            raise UsageError(f"{where}.parser: expected one of {', '.join(CHECK_PARSERS)}, found {parser!r}")
        report = _path(item["report"], f"{where}.report", base) if "report" in item else None
        if parser == "junit" and report is None:
            raise UsageError(f"{where}: parser \"junit\" needs report = \"path/to/junit.xml\"")
        timeout = _seconds(item.get("timeout", 3600), f"{where}.timeout")
        cwd = _path(item["cwd"], f"{where}.cwd", base) if "cwd" in item else base
        out.append(CheckSpec(name, command, parser, report, timeout, cwd))
    return tuple(out)


def _build(section: Any, base: Path | None) -> BuildSpec | None:
    if section is None:
        return None
    if not isinstance(section, dict):
        raise UsageError("build: expected a [build] table with command and server_bin")
    _unknown(section, _BUILD_KEYS, "[build]")
    command = section.get("command")
    if not isinstance(command, str) or not command.strip():
        raise UsageError("build.command: expected a non-empty shell command, e.g. \"cmake --build build -j\"")
    if "server_bin" not in section:
        raise UsageError("build.server_bin: expected the path of the binary the build produces")
    cwd = _path(section["cwd"], "build.cwd", base) if "cwd" in section else base
    timeout = _seconds(section.get("timeout", DEFAULT_BUILD_TIMEOUT_S), "build.timeout")
    return BuildSpec(command, cwd, timeout, _path(section["server_bin"], "build.server_bin", base).absolute())


def _pick(overrides: Mapping[str, Any], file_gate: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = overrides.get(key)
    if value is not None:
        return value
    return file_gate.get(key, default)


def load(config_file: Path | None, overrides: Mapping[str, Any]) -> GateConfig:
    """Merge the config file (if any) with CLI overrides (non-None values win) and validate."""
    doc: dict[str, Any] = read_toml(config_file) if config_file is not None else {}
    _unknown(doc, _TOP_KEYS, str(config_file))
    file_gate = doc.get("gate", {})
    runner_section = doc.get("runner", {})
    if not isinstance(file_gate, dict) or not isinstance(runner_section, dict):
        raise UsageError(f"{config_file}: [gate] and [runner] must be tables")
    _unknown(file_gate, _GATE_KEYS, "[gate]")
    _unknown(runner_section, _RUNNER_KEYS, "[runner]")
    # Per-runner overrides: [runners.<name>] may hold any [gate] key plus role/negative_control_for,
    # e.g. target_device = "cuda:0" on the NVIDIA runner. Precedence: CLI > [runners.<name>] > [gate].
    runner_name = overrides.get("runner") or file_gate.get("runner") or runner_section.get("name")
    per_runner = doc.get("runners", {})
    if not isinstance(per_runner, dict) or not all(isinstance(v, dict) for v in per_runner.values()):
        raise UsageError(f"{config_file}: [runners.<name>] entries must be tables")
    if runner_name is None and per_runner:
        runner_name = socket.gethostname()
    own = per_runner.get(runner_name, {}) if runner_name is not None else {}
    if per_runner and runner_name not in per_runner:
        raise UsageError(
            f"{config_file}: runner {runner_name!r} has no [runners.{runner_name}] table; "
            f"configured runners: {', '.join(sorted(per_runner))}"
        )
    _unknown(own, (_GATE_KEYS - {"runner"}) | (_RUNNER_KEYS - {"name"}), f"[runners.{runner_name}]")
    file_gate = {**file_gate, **{k: v for k, v in own.items() if k in _GATE_KEYS}}
    runner_section = {**runner_section, **{k: v for k, v in own.items() if k in _RUNNER_KEYS}}
    base = config_file.resolve().parent if config_file is not None else None

    # Paths that came from the CLI are relative to the working directory; from the file, to the file.
    def path_of(key: str, required: bool) -> Path | None:
        if overrides.get(key) is not None:
            return _path(overrides[key], f"--{key.replace('_', '-')}", None)
        if key in file_gate:
            return _path(file_gate[key], f"gate.{key}", base)
        if required:
            raise UsageError(f"missing --{key.replace('_', '-')} (or gate.{key} in the config file)")
        return None

    role = runner_section.get("role", "gate")
    if role not in RUNNER_ROLES:
        raise UsageError(f"runner.role: expected one of {', '.join(RUNNER_ROLES)}, found {role!r}")
    needs_models = role == "gate"

    def pinned(key: str, required_sha: bool, sha_key: str) -> PinnedFile:
        path = path_of(key, needs_models)
        sha = parse_sha256(_pick(overrides, file_gate, sha_key), sha_key)
        if needs_models and required_sha and sha is None:
            raise UsageError(f"missing --{key}-sha256: the {key} file must be pinned by SHA-256")
        return PinnedFile(key, path if path is not None else Path(), sha)

    # The binary hashed is the binary run: an absolute path, never looked up on PATH. With a
    # [build] (unless --no-build) it is the binary the build produces, checked once it is built.
    build = None if overrides.get("no_build") else _build(doc.get("build"), base)
    if build is not None:
        if overrides.get("server_bin") is not None or "server_bin" in file_gate:
            raise UsageError(
                "the server binary is given twice: [build].server_bin (the built binary) and "
                "--server-bin / gate.server_bin; keep one (or pass --no-build to use an existing binary)"
            )
        sha = parse_sha256(_pick(overrides, file_gate, "server_sha256"), "server_sha256")
        server_bin = PinnedFile("server_bin", build.server_bin, sha)
    else:
        server_bin = pinned("server_bin", required_sha=False, sha_key="server_sha256")
        server_bin = PinnedFile(server_bin.role, server_bin.path.absolute(), server_bin.sha256)
    target = pinned("target", required_sha=True, sha_key="target_sha256")
    draft = pinned("draft", required_sha=True, sha_key="draft_sha256")
    prompts = _prompts(file_gate.get("prompts"), overrides.get("prompt_files"), overrides.get("prompt_sha256s"), base)
    seen_prompts: dict[Path, int] = {}
    for i, prompt in enumerate(prompts):
        first = seen_prompts.setdefault(prompt.path.resolve(), i)
        if first != i:
            raise UsageError(f"prompt file {prompt.path} is given twice (#{first + 1} and #{i + 1}); list each prompt once")
    if needs_models:
        if not prompts:
            raise UsageError("missing --prompt-file/--prompt-sha256 (or gate.prompts in the config file)")
        for prompt in prompts:
            if prompt.sha256 is None:
                raise UsageError(f"{prompt.path}: every prompt must be pinned by SHA-256")
        for item in (target, draft, *prompts, *([] if build else [server_bin])):
            if not item.path.is_file():
                raise UsageError(f"{item.role} file {item.path} does not exist or is not a regular file")
        if build is None and not os.access(server_bin.path, os.X_OK):
            raise UsageError(f"server binary {server_bin.path} is not executable")
        _nonempty_prompts(prompts)

    # Default: ./ds4ci-evidence in the working directory (never a shared temp dir).
    evidence_dir = path_of("evidence_dir", required=False) or Path("ds4ci-evidence")
    results_out = path_of("results_out", required=False)
    if results_out is not None and results_out.is_dir():
        raise UsageError(f"--results-out {results_out} is a directory; expected a file path such as results.json")
    bundle_out = path_of("bundle_out", required=False)
    if bundle_out is not None and (bundle_out.is_dir() or not bundle_out.name.endswith(".tar.gz")):
        raise UsageError(f"--bundle-out {bundle_out}: expected a file path ending in .tar.gz")

    runner = _pick(overrides, file_gate, "runner") or runner_section.get("name") or socket.gethostname()
    if not isinstance(runner, str) or not _RUNNER_NAME.match(runner):
        raise UsageError(
            f"runner name: expected letters, digits, '.', '_' or '-' (max 63, used in ds4ci/<runner>), found {runner!r}"
        )

    # A run that leaves out a configured width (e.g. a dispatch with widths: 2) is a focused rerun.
    configured_widths = parse_widths(file_gate.get("widths", list(DEFAULT_WIDTHS)), "gate.widths")
    widths = parse_widths(_pick(overrides, file_gate, "widths", list(DEFAULT_WIDTHS)))
    max_tokens = _int(_pick(overrides, file_gate, "max_tokens", 96), "max_tokens", 2)
    seed = _int(_pick(overrides, file_gate, "seed", 1234), "seed", 0)
    if seed > MAX_SEED:
        raise UsageError(f"seed: the server reads it as an unsigned 64-bit integer; expected at most {MAX_SEED}, found {seed}")
    repeats = _int(_pick(overrides, file_gate, "repeats", 2), "repeats", 1)
    mmvq = _int(_pick(overrides, file_gate, "mmvq_max_ncols", max(widths)), "mmvq_max_ncols", 1)
    if mmvq < max(widths):
        raise UsageError(
            f"mmvq_max_ncols ({mmvq}) must be >= every width q; largest width is {max(widths)}"
        )
    stale = file_gate.get("stale_override_files", list(DEFAULT_STALE_OVERRIDE_FILES))
    if not isinstance(stale, list) or not all(isinstance(s, str) and s for s in stale):
        raise UsageError("gate.stale_override_files: expected a list of paths")
    hash_cache_path = path_of("hash_cache_path", required=False)
    # What PR code could write between runs is never trusted: under Actions (a runner that may run
    # untrusted pull requests) the cache is used only from a path configured on purpose.
    hash_cache = _pick(overrides, file_gate, "hash_cache", not (under_actions() and hash_cache_path is None))
    if not isinstance(hash_cache, bool):
        raise UsageError(f"gate.hash_cache: expected true or false, found {hash_cache!r}")
    target_device = _pick(overrides, file_gate, "target_device", "hip:0")
    if not isinstance(target_device, str) or not re.match(r"^[a-z]+:\d+$", target_device):
        raise UsageError(f"target_device: expected a device like hip:0 or cuda:0, found {target_device!r}")
    device_args = file_gate.get("device_args")
    server_args = overrides.get("server_args") or file_gate.get("server_args", [])
    log_cap_mib = _int(_pick(overrides, file_gate, "log_cap_mib", 512), "log_cap_mib", 1)
    negative_for = runner_section.get("negative_control_for")
    if negative_for is not None and not isinstance(negative_for, str):
        raise UsageError("runner.negative_control_for: expected a runner name")
    for ref_key in ("base_ref", "upstream_ref"):
        ref = _pick(overrides, file_gate, ref_key)
        if ref is not None and (not isinstance(ref, str) or not ref or ref.startswith("-")):
            raise UsageError(f"{ref_key}: expected a git ref, found {ref!r}")

    return GateConfig(
        server_bin=server_bin,
        target=target,
        draft=draft,
        prompts=prompts,
        evidence_dir=evidence_dir.absolute(),
        results_out=results_out,
        runner=runner,
        role=role,
        negative_control_for=negative_for,
        widths=widths,
        max_tokens=max_tokens,
        seed=seed,
        repeats=repeats,
        target_device=target_device,
        max_ctx=_int(_pick(overrides, file_gate, "max_ctx", 4096), "max_ctx", 1),
        chunk=_int(_pick(overrides, file_gate, "chunk", 512), "chunk", 1),
        mmvq_max_ncols=mmvq,
        startup_timeout_s=_seconds(_pick(overrides, file_gate, "startup_timeout", 600), "startup_timeout"),
        request_timeout_s=_seconds(_pick(overrides, file_gate, "request_timeout", 600), "request_timeout"),
        stop_timeout_s=_seconds(_pick(overrides, file_gate, "stop_timeout", 60), "stop_timeout"),
        hash_cache=hash_cache,
        hash_cache_path=hash_cache_path,
        stale_override_files=tuple(Path(expand_vars(s, "gate.stale_override_files")) for s in stale),
        device_args=(
            _server_args(device_args, "device_args") if device_args is not None else default_device_args(target_device)
        ),
        server_args=_server_args(server_args, "server_args"),
        env_prefixes=_env_prefixes(_pick(overrides, file_gate, "env_prefixes", list(ENV_PREFIXES))),
        log_cap_mib=log_cap_mib,
        checks=_checks(doc.get("checks"), base),
        source_dir=path_of("source_dir", required=False),
        base_ref=_pick(overrides, file_gate, "base_ref"),
        upstream_ref=_pick(overrides, file_gate, "upstream_ref"),
        config_file=config_file,
        bundle_out=bundle_out,
        notes=_notes(overrides.get("notes")),
        build=build,
        configured_widths=configured_widths,
    )

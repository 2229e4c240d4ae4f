"""Loading ``ds4ci.toml`` plus CLI overrides into one validated, frozen ``GateConfig``.

Which keys exist, their defaults and their checkers come from ``ds4ci.options.table``; this module
applies precedence (CLI > ``[runners.<name>]`` > ``[gate]``/``[runner]`` > table default) and the
rules that tie settings together. Paths in the file are relative to the file's directory and may
use ``${VAR}`` (for example a model directory that a workflow takes from a repository variable);
an unset variable is an error, never an empty string.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options import inputfiles, sandboxrule, sections, table
from ds4ci.options import values as v
from ds4ci.options.sections import BuildSpec, CheckSpec, PinnedFile, read_section
from ds4ci.options.table import (
    DEFAULT_STALE_OVERRIDE_FILES,
    DEFAULT_WIDTHS,
    HIP_DEVICE_ARGS,
    OTHER_DEVICE_ARGS,
    default_device_args,
)
from ds4ci.options.values import (
    CHECK_PARSERS,
    MAX_SECONDS,
    MAX_SEED,
    OWNED_SERVER_FLAGS,
    RUNNER_ROLES,
    expand_vars,
    parse_sha256,
    parse_widths,
    read_toml,
    under_actions,
)

__all__ = [
    "CHECK_PARSERS", "DEFAULT_STALE_OVERRIDE_FILES", "DEFAULT_WIDTHS", "FOCUSED", "FULL", "HIP_DEVICE_ARGS",
    "MAX_SECONDS", "MAX_SEED", "OTHER_DEVICE_ARGS", "OWNED_SERVER_FLAGS", "RUNNER_ROLES", "BuildSpec", "CheckSpec",
    "GateConfig", "PinnedFile", "default_device_args", "expand_vars", "load", "parse_sha256", "parse_widths",
    "read_section", "read_toml", "under_actions",
]

FULL, FOCUSED = "full", "focused"
SIMULATOR = "simulator"


def simulator_entry() -> Path:
    """The file the gate starts for ``server = "simulator"`` (with ds4ci's own interpreter): hashed and recorded."""
    import ds4ci

    return Path(ds4ci.__file__).resolve().parent / "simulator" / "__main__.py"


@dataclass(frozen=True)
class SandboxSettings:
    """``[sandbox]`` (with ``[runners.<name>]`` applied): the supervisor builds its policy from it."""

    require: bool = False
    enabled: bool = True
    ro_paths: tuple[Path, ...] = ()
    rw_paths: tuple[Path, ...] = ()
    devices: tuple[str, ...] = ()
    cpu_online: bool = False  # the server sees only the CPUs of its affinity as online


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
    env_prefixes: tuple[str, ...] = table.get("gate", "env_prefixes").default
    server_interpreters: tuple[str, ...] = table.DEFAULT_SERVER_INTERPRETERS  # a script server's allowed #! lines
    log_cap_mib: int = table.get("gate", "log_cap_mib").default
    require_coverage: bool = table.get("gate", "require_coverage").default
    text_parity: bool = table.get("gate", "text_parity").default
    checks: tuple[CheckSpec, ...] = ()
    source_dir: Path | None = None
    base_ref: str | None = None
    upstream_ref: str | None = None
    config_file: Path | None = None
    config_base: Path | None = None  # --config-base: where the file's relative paths start (else its own folder)
    bundle_out: Path | None = None
    notes: tuple[str, ...] = ()  # reviewer notes from the caller (CLI only), recorded as warnings
    build: BuildSpec | None = None
    configured_widths: tuple[int, ...] = DEFAULT_WIDTHS
    gpu: tuple[str, ...] = ()  # the GPU this runner must have (any one of these); () when not stated
    sandbox: SandboxSettings = SandboxSettings()
    signing_key: Path | None = None
    allow_dirty_tree: bool = False
    devices: tuple[str, ...] = ()  # [gate] devices as configured; () means target_device alone
    parallel: int = 1  # [gate] parallel: arms side by side on each device
    server: str = "program"  # table.SERVER_KINDS: server_bin, or ds4ci's bundled simulator
    signing: str = "service"  # table.SIGNING_KINDS: "job-key" lets a job sign with a key its user can read
    service_state: Path | None = None  # run by the gate service: its state folder, out of every config path's reach
    calibrations: Path | None = None  # this runner's calibration records: the latest is verified and cited

    @property
    def simulator(self) -> bool:
        """The server is ds4ci's bundled simulator (``gate.server = "simulator"``), named by trusted config."""
        return self.server == SIMULATOR

    @property
    def scope(self) -> str:
        """``full`` when this run proves every configured width, else ``focused`` (a focused rerun)."""
        return FULL if set(self.widths) >= set(self.configured_widths) else FOCUSED

    @property
    def log_cap_bytes(self) -> int:
        return self.log_cap_mib << 20

    @property
    def prebuilt_server_bin(self) -> Path | None:
        """The server binary as given (--server-bin); None when ``[build]`` produces it."""
        return self.server_bin.path if self.build is None and not self.simulator else None

    def arm_devices(self) -> tuple[str, ...]:
        """The devices the arms run on, each passed to its server as --target-device (the one place a device is set)."""
        return self.devices or (self.target_device,)

    def server_args_all(self) -> tuple[str, ...]:
        """Every argument after the ones ds4ci owns: the device defaults (or their replacement), then extras."""
        return (*self.device_args, *self.server_args)


@dataclass(frozen=True)
class _Sources:
    """Where each value comes from: CLI overrides first, then the file's merged tables."""

    overrides: Mapping[str, Any]
    tables: Mapping[str, Mapping[str, Any]]  # "gate" and "runner", with [runners.<name>] applied
    base: Path | None

    def given(self, option: table.Option) -> tuple[Any, str, bool] | None:
        """(raw value, where it was given, whether it came from the file), or None when not given."""
        value = self.overrides.get(option.name)
        if value is not None and not (option.repeat and not value):
            return value, option.flag or option.name, False
        found = self.tables.get(option.section, {})
        if option.key in found:
            return found[option.key], f"{option.section}.{option.key}", True
        return None

    def value(self, key: str, section: str = "gate") -> Any:
        option = table.get(section, key)
        found = self.given(option)
        if found is None:
            return option.default
        raw, where, from_file = found
        if from_file:
            file_type(option, raw, where)
        return option.check(raw, where) if option.check is not None else raw

    def path(self, key: str, required: bool = False) -> Path | None:
        """A path: from the CLI relative to the working directory, from the file relative to the file."""
        option = table.get("gate", key)
        found = self.given(option)
        if found is None:
            if required:
                raise UsageError(f"missing {option.flag} (or gate.{key} in the config file)")
            return None
        raw, where, from_file = found
        return v.path(raw, where, self.base if from_file else None)


def file_type(option: table.Option, raw: Any, where: str) -> None:
    """A file states an array as a TOML array: ``widths = "2,3,4"`` is refused although ``--widths 2,3,4`` is not."""
    if option.toml_type.startswith("array") and isinstance(raw, str):
        example = "[2, 3, 4]" if option.key == "widths" else '["..."]'
        raise UsageError(
            f"{where}: expected a TOML {option.toml_type} such as {option.key} = {example}, found the string {raw!r} "
            f"(only the command line flag takes a comma-separated string)"
        )


def _own_runner_table(doc: Mapping[str, Any], name: str | None, source: Path | None) -> tuple[str | None, dict[str, Any]]:
    """``[runners.<name>]`` for this runner (the host name when nothing names it); {} when there are none."""
    per_runner = doc.get("runners", {})
    if not isinstance(per_runner, dict) or not all(isinstance(t, dict) for t in per_runner.values()):
        raise UsageError(f"{source}: [runners.<name>] entries must be tables")
    if not per_runner:
        return name, {}
    name = name if name is not None else socket.gethostname()
    if name not in per_runner:
        raise UsageError(
            f"{source}: runner {name!r} has no [runners.{name}] table; configured runners: {', '.join(sorted(per_runner))}; "
            f"pass --runner NAME with one of them (without --runner the name is runner.name, else the host name)"
        )
    own: dict[str, Any] = per_runner[name]
    sections.unknown(own, table.keys("runners"), f"[runners.{name}]")
    return name, own


def _sources(doc: Mapping[str, Any], source: Path | None, overrides: Mapping[str, Any]) -> _Sources:
    sections.unknown(doc, set(table.TOP_KEYS), str(source))
    for name in ("merge", "publish", "preflight"):  # read by merge-check, publish and preflight; checked here too
        sections.section(doc, name, source)
    if not isinstance(doc.get("gate", {}), dict) or not isinstance(doc.get("runner", {}), dict):
        raise UsageError(f"{source}: [gate] and [runner] must be tables")
    gate, runner = sections.section(doc, "gate", source), sections.section(doc, "runner", source)
    _, own = _own_runner_table(doc, overrides.get("runner") or gate.get("runner") or runner.get("name"), source)
    merged = {
        name: {**found, **{k: val for k, val in own.items() if k in table.keys(name)}}
        for name, found in (("gate", gate), ("runner", runner), ("sandbox", sections.section(doc, "sandbox", source)))
    }
    return _Sources(overrides, merged, config_base(source, overrides.get("config_base")))


def config_base(source: Path | None, given: Path | None) -> Path | None:
    """Where the file's relative paths start: ``--config-base`` (made absolute, never resolved: a link there is the
    sandbox's and the file reader's to refuse), else the config file's own folder."""
    if given is None:
        return source.resolve().parent if source is not None else None
    if not given.is_dir():
        raise UsageError(f"--config-base {given}: expected the folder the config's relative paths are read from, "
                         "found no folder there")
    return Path(os.path.normpath(given.absolute()))


def _pinned(src: _Sources, key: str, needs_models: bool) -> PinnedFile:
    path = src.path(key, required=needs_models)
    sha = src.value(f"{key}_sha256")
    if needs_models and sha is None:
        raise UsageError(f"missing --{key}-sha256: the {key} file must be pinned by SHA-256")
    return PinnedFile(key, path if path is not None else Path(), sha)


def _server_bin(src: _Sources, build: BuildSpec | None, needs_models: bool) -> PinnedFile:
    """The binary hashed is the binary run: an absolute path, never looked up on PATH. With a
    ``[build]`` (unless --no-build) it is the binary the build produces, checked once it is built.
    With ``server = "simulator"`` it is the simulator's entry file, which ds4ci's interpreter runs."""
    sha = src.value("server_sha256")
    if src.value("server") == SIMULATOR:
        named = [k for k in ("server_bin", "server_sha256") if src.given(table.get("gate", k)) is not None]
        if named:
            raise UsageError(
                f"the server is given twice: gate.server = \"simulator\" (ds4ci's bundled simulator) and "
                f"{' and '.join(named)}; keep one")
        return PinnedFile("server_bin", simulator_entry(), None)
    if build is None:
        path = src.path("server_bin", required=needs_models)
        return PinnedFile("server_bin", (path if path is not None else Path()).absolute(), sha)
    if src.given(table.get("gate", "server_bin")) is not None:
        raise UsageError(
            "the server binary is given twice: [build].server_bin (the built binary) and "
            "--server-bin / gate.server_bin; keep one (or pass --no-build to use an existing binary)"
        )
    return PinnedFile("server_bin", build.server_bin, sha)


def _prompts(src: _Sources, found: Any) -> tuple[PinnedFile, ...]:
    prompts = sections.prompts(found, src.overrides.get("prompt_files"), src.overrides.get("prompt_sha256s"), src.base)
    seen: dict[Path, int] = {}
    for i, prompt in enumerate(prompts):
        first = seen.setdefault(prompt.path.resolve(), i)
        if first != i:
            raise UsageError(f"prompt file {prompt.path} is given twice (#{first + 1} and #{i + 1}); list each prompt once")
    return prompts


def _outputs(src: _Sources) -> dict[str, Any]:
    # Default: ./ds4ci-evidence in the working directory (never a shared temp dir).
    evidence_dir = src.path("evidence_dir") or Path(table.DEFAULT_EVIDENCE_DIR)
    results_out, bundle_out = src.path("results_out"), src.path("bundle_out")
    if results_out is not None and results_out.is_dir():
        raise UsageError(f"--results-out {results_out} is a directory; expected a file path such as results.json")
    if bundle_out is not None and (bundle_out.is_dir() or not bundle_out.name.endswith(".tar.gz")):
        raise UsageError(f"--bundle-out {bundle_out}: expected a file path ending in .tar.gz")
    return {"evidence_dir": evidence_dir.absolute(), "results_out": results_out, "bundle_out": bundle_out}


def _widths(src: _Sources) -> dict[str, Any]:
    # A run that leaves out a configured width (e.g. a dispatch with widths: 2) is a focused rerun.
    raw = src.tables["gate"].get("widths", DEFAULT_WIDTHS)
    file_type(table.get("gate", "widths"), raw, "gate.widths")
    configured = parse_widths(raw, "gate.widths")
    widths: tuple[int, ...] = src.value("widths")
    outside = [q for q in widths if q not in configured]
    if outside and "widths" in src.tables["gate"]:  # a focused rerun proves some of the configured widths, no other
        raise UsageError(
            f"--widths {','.join(map(str, widths))}: {','.join(map(str, outside))} not among the configured widths "
            f"{','.join(map(str, configured))} (gate.widths); a focused rerun runs a subset of them: to prove "
            "another width, add it to gate.widths"
        )
    mmvq = src.value("mmvq_max_ncols")
    mmvq = max(widths) if mmvq is None else mmvq
    if mmvq < max(widths):
        raise UsageError(f"mmvq_max_ncols ({mmvq}) must be >= every width q; largest width is {max(widths)}")
    return {"widths": widths, "configured_widths": configured, "mmvq_max_ncols": mmvq}


def _server(src: _Sources) -> dict[str, Any]:
    target_device: str = src.value("target_device")
    device_args = src.value("device_args")
    stale = src.value("stale_override_files")
    hash_cache_path = src.path("hash_cache_path")
    # What PR code could write between runs is never trusted: under Actions (a runner that may run
    # untrusted pull requests) the cache is used only from a path configured on purpose.
    hash_cache = src.value("hash_cache")
    return {
        "target_device": target_device, **_placement(src, target_device),
        "device_args": device_args if device_args is not None else default_device_args(target_device),
        "stale_override_files": tuple(Path(expand_vars(s, "gate.stale_override_files")) for s in stale),
        "hash_cache_path": hash_cache_path,
        "hash_cache": hash_cache if hash_cache is not None else not (under_actions() and hash_cache_path is None),
    }


def _placement(src: _Sources, target_device: str) -> dict[str, Any]:
    """[gate] devices and parallel, checked against target_device and the number of configured arms."""
    devices: tuple[str, ...] = src.value("devices") or ()
    parallel: int = src.value("parallel")
    configured = parse_widths(src.tables["gate"].get("widths", DEFAULT_WIDTHS), "gate.widths")
    arms = 1 + len(configured)  # target-only and one reference-exact arm per configured width
    kind = target_device.split(":", maxsplit=1)[0]
    if devices and devices[0].split(":", maxsplit=1)[0] != kind:
        raise UsageError(f"devices: {', '.join(devices)} are not of target_device's kind ({target_device}); the "
                         f"server arguments follow target_device, so set it to one of them (e.g. {devices[0]})")
    if len(devices) > arms:
        raise UsageError(f"devices: {len(devices)} listed, but the gate has only {arms} arms (target-only and "
                         f"{len(configured)} width(s)); list at most {arms}")
    if parallel > arms:
        raise UsageError(f"parallel = {parallel}, but the gate has only {arms} arms (target-only and "
                         f"{len(configured)} width(s)); at most {arms} can run side by side")
    return {"devices": devices, "parallel": parallel}


# Settings with a checker and a default, taken from the table as they are: GateConfig field -> key.
_PLAIN = ("max_tokens", "seed", "repeats", "max_ctx", "chunk", "server_args", "env_prefixes", "server_interpreters",
          "log_cap_mib", "require_coverage", "text_parity", "base_ref", "upstream_ref", "allow_dirty_tree")
_SECONDS = {"startup_timeout_s": "startup_timeout", "request_timeout_s": "request_timeout",
            "stop_timeout_s": "stop_timeout"}


def _sandbox(src: _Sources) -> SandboxSettings:
    def dirs(key: str) -> tuple[Path, ...]:
        return tuple(v.path(p, f"sandbox.{key}", src.base).absolute() for p in src.value(key, "sandbox"))

    enabled = src.value("enabled", "sandbox")
    require = sandboxrule.required(enabled, src.value("require", "sandbox"))
    return SandboxSettings(require, enabled, dirs("ro_paths"), dirs("rw_paths"),
                           tuple(src.value("devices", "sandbox")), src.value("cpu_online", "sandbox"))


def _calibrations(src: _Sources) -> Path | None:
    found = src.given(table.get("gate", "calibrations"))
    if found is None:
        return None
    raw, where, from_file = found
    path = v.path(raw, where) if from_file else v.path(raw, where).absolute()
    if not path.is_absolute():  # a relative path would point into the checkout, beside the config
        raise UsageError(f"{where}: expected an absolute path outside the checkout (the runner's calibration records), "
                         f"found {raw!r}")
    return path


def load(
    config_file: Path | None, overrides: Mapping[str, Any], check_files: bool = True, doc: dict[str, Any] | None = None
) -> GateConfig:
    """Merge the config file (if any) with CLI overrides (non-None values win) and validate.

    ``check_files=False`` (``ds4ci config check``) checks every value's form but not that the files exist;
    ``doc``: the file already parsed (paths stay relative to ``config_file``).
    """
    if doc is None:
        doc = read_toml(config_file) if config_file is not None else {}
    src = _sources(doc, config_file, overrides)
    sandbox = _sandbox(src)  # first: under Actions a config that turns the sandbox off is refused before all else
    role = src.value("role", "runner")
    needs_models = role == "gate"
    build = None if overrides.get("no_build") else sections.build(doc.get("build"), src.base)
    checks = sections.checks(doc.get("checks"), src.base)
    server_bin = _server_bin(src, build, needs_models)
    target, draft = _pinned(src, "target", needs_models), _pinned(src, "draft", needs_models)
    prompts = _prompts(src, src.tables["gate"].get("prompts"))
    if needs_models and check_files:
        inputfiles.check_given(prompts, (target, draft), server_bin if build is None and src.value("server") != SIMULATOR
                               else None, overrides)
    runner = src.value("runner") or src.value("name", "runner") or socket.gethostname()
    return GateConfig(
        server_bin=server_bin, target=target, draft=draft, prompts=prompts,
        runner=v.runner_name(runner, "runner name"), role=role,
        negative_control_for=src.value("negative_control_for", "runner"), gpu=src.value("gpu", "runner"),
        **_outputs(src), **_widths(src), **_server(src),
        **{key: src.value(key) for key in _PLAIN}, **{field: src.value(key) for field, key in _SECONDS.items()},
        checks=checks, source_dir=src.path("source_dir"),
        config_file=config_file, config_base=src.base if overrides.get("config_base") is not None else None,
        notes=src.value("notes", table.CLI) or (), build=build,
        sandbox=sandbox, signing_key=src.path("signing_key"), server=src.value("server"),
        signing=src.value("signing"), service_state=src.value("service_state", table.CLI),
        calibrations=_calibrations(src),
    )

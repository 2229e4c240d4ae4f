"""Every setting, declared once: its key in ``ds4ci.toml``, its flag, its default and its meaning.

The config loader, the ``gate`` command's flags, the recorded ``results.json`` settings, the
reproduce command and ``docs/configuration.md`` are all read from :data:`OPTIONS`. A setting
added here appears in all of them; one left out here is refused by the loader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.options import values as v
from ds4ci.options.policy import ENV_PREFIXES

DEFAULT_WIDTHS = (2, 3, 4)
DEFAULT_STALE_OVERRIDE_FILES = ("/tmp/ds4_spec_q", "/tmp/ds4_awidth")  # noqa: S108 - the server reads these
DEFAULT_EVIDENCE_DIR = "ds4ci-evidence"
SERVER_KINDS = ("program", "simulator")  # gate.server: the configured binary, or ds4ci's bundled simulator
COMMENT_MODES = ("always", "failures", "off")  # publish.comment_mode
SIGNING_KINDS = ("service", "job-key")  # gate.signing: whose key may sign under GitHub Actions
VOUCH_KINDS = ("workflow", "publisher")  # merge.vouch: which of GitHub's records vouches for a green gate
# The interpreters a server that is a script may name: the system's shell and env (a test server, a wrapper).
DEFAULT_SERVER_INTERPRETERS = ("/bin/sh", "/usr/bin/sh", "/usr/bin/env")
DEFAULT_CONFIG = "ds4ci.toml"  # read from the working directory by `gate` and `config check` when no --config
DEFAULT_CHECK_TIMEOUT_S = 3600.0
DEFAULT_BUILD_TIMEOUT_S = 4 * 3600.0
DEFAULT_APPROVALS = 1
DEFAULT_PUBLISHER = "github-actions[bot]"  # who posts statuses from a workflow's GITHUB_TOKEN
DEFAULT_CHECK_APP = "github-actions"  # the app.slug of check runs made by GitHub Actions jobs
# Arguments that depend on the device kind: --ds4-fused-decode exists only for single-device HIP
# DeepSeek4; a CUDA server refuses it and exits 2 before listening.
HIP_DEVICE_ARGS = ("--ds4-fused-decode", "--ds4-prefill", "exact")
OTHER_DEVICE_ARGS = ("--ds4-prefill", "exact")
CLI = "cli"  # the section of flags that no file sets
SECTION_TITLES = {
    "gate": "[gate]", "runner": "[runner]", "runners": "[runners.<name>]", "build": "[build]",
    "checks": "[[checks]]", "merge": "[merge]", "merge.checks": "[[merge.checks]]", "preflight": "[preflight]",
    "publish": "[publish]",
    "sandbox": "[sandbox]",
    CLI: "command line only",
}


@dataclass(frozen=True)
class Option:
    """One setting. ``section``/``key`` place it in ``ds4ci.toml`` (section ``cli``: no file key)."""

    section: str
    key: str
    help: str
    check: v.Checker | None = None  # None: read by a dedicated step of the loader (paths, pins, prompts)
    default: Any = None  # None: no default, or one computed at load time (see default_doc)
    default_doc: str | None = None  # how a computed default is described
    toml_type: str = "string"
    flag: str | None = None  # None: config only
    command: str = "gate"  # the command the flag belongs to
    cli_type: type = str
    repeat: bool = False  # the flag may be given several times
    switch: bool | None = None  # a flag without value: the setting it gives (--no-hash-cache: False)
    dest: str | None = None  # the override key and GateConfig field, when not ``key``
    runner_table: bool = False  # [runners.<name>] may set it
    recorded: str | None = None  # the results.json ``settings`` field
    attr: str | None = None  # where the value sits on GateConfig (dotted, ``*`` for each item)
    record_attr: str | None = None  # what is recorded, when not ``attr`` (a method is called)
    reproduce: bool = False  # the reproduce command repeats it
    metavar: str | None = None
    flag_doc: str | None = None  # the flag's help when it differs from the key's (a switch)
    omit_default: bool = False  # the reproduce command leaves the flag out when the value is the default

    @property
    def name(self) -> str:
        return self.dest or self.key

    @property
    def config_key(self) -> str | None:
        return None if self.section == CLI else f"{self.section}.{self.key}"

    def default_text(self) -> str | None:
        if self.default_doc is not None:
            return self.default_doc
        if self.default is None or self.default == ():
            return None
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, tuple):
            return ",".join(str(x) for x in self.default) if self.key == "widths" else str(list(self.default))
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    def toml_default(self) -> str | None:
        """The default as TOML would write it (or the description of a computed one)."""
        if self.default_doc is not None or self.default is None or self.default == ():
            return self.default_doc
        value = list(self.default) if isinstance(self.default, tuple) else self.default
        return json.dumps(value) if not isinstance(value, float) else f"{value:g}"

    def flag_help(self) -> str:
        """``--help`` text: the meaning, the default (value flags) and the config key it overrides."""
        if self.switch is not None:
            text = self.flag_doc or self.help
        else:
            default = self.default_text()
            text = self.help + (f" Default: {default}." if default is not None else "")
        if self.repeat and "repeat" not in text:
            text += " Repeatable."
        return text + (f" Config: {self.config_key}." if self.config_key else "")

    @property
    def param(self) -> str:
        """The Python parameter name of the flag (``--max-tokens``: ``max_tokens``)."""
        return (self.flag or "").lstrip("-").replace("-", "_")


def _gate(key: str, help: str, **kw: Any) -> Option:
    return Option("gate", key, help, flag=kw.pop("flag", "--" + key.replace("_", "-")),
                  runner_table=kw.pop("runner_table", key != "runner"), **kw)


_PIN = "Pinned SHA-256 of the {}"
OPTIONS: tuple[Option, ...] = (
    Option(CLI, "config", "ds4ci.toml with the gate settings; flags override it.", flag="--config",
           cli_type=Path, dest="config_file", attr="config_file", reproduce=True,
           default_doc="./ds4ci.toml when that file exists"),
    Option(CLI, "config_base", "The folder the config's relative paths ([build] cwd, prompts, server_bin...) are read "
           "from, when the config file itself lies elsewhere: gate.yml keeps the trusted settings outside the checkout "
           "($RUNNER_TEMP), where no pull-request build can rewrite them, and names the checkout's folder here.",
           flag="--config-base", cli_type=Path, metavar="DIR", attr="config_base", reproduce=True,
           default_doc="the config file's own folder"),
    _gate("server_bin", "The inference server binary (dflash_server, or any program speaking its protocol); "
          "with [build], the binary is build.server_bin instead.", toml_type="path", cli_type=Path,
          attr="prebuilt_server_bin", reproduce=True),
    _gate("server", "What the gate starts: \"program\" (server_bin, or the binary [build] makes) or \"simulator\" "
          "(ds4ci's bundled simulator, run by the Python this ds4ci runs on, which the sandbox then shows read-only "
          "because this trusted setting says so; no GPU, no server_bin: for trying the gate and the workflows).",
          check=v.one_of(SERVER_KINDS), default="program", attr="server", reproduce=True, metavar="KIND",
          omit_default=True, recorded="server"),
    _gate("server_interpreters", "The interpreters a server that is a script (#!) may name, as absolute paths; a "
          "server is run only when it is an ELF executable or such a script, anything else is refused before it runs "
          "(an empty list: ELF executables only).", check=v.interpreters, default=DEFAULT_SERVER_INTERPRETERS,
          toml_type="array of strings", flag=None, attr="server_interpreters"),
    _gate("server_sha256", _PIN.format("server binary; its identity is recorded either way."),
          check=v.parse_sha256, attr="server_bin.sha256", reproduce=True, metavar="HEX"),
    _gate("target", "Target model file (GGUF).", toml_type="path", cli_type=Path, attr="target.path", reproduce=True),
    _gate("target_sha256", _PIN.format("target model (required)."), check=v.parse_sha256, attr="target.sha256",
          reproduce=True, metavar="HEX"),
    _gate("draft", "Draft model file (GGUF).", toml_type="path", cli_type=Path, attr="draft.path", reproduce=True),
    _gate("draft_sha256", _PIN.format("draft model (required)."), check=v.parse_sha256, attr="draft.sha256",
          reproduce=True, metavar="HEX"),
    _gate("prompts", "Prompt files, each pinned: an array of tables {file = \"p.txt\", sha256 = \"...\"}; "
          "on the command line --prompt-file/--prompt-sha256.", toml_type="array of tables", flag=None),
    Option(CLI, "prompt_files", "Prompt text file; repeat for several prompts, each paired in order with "
           "--prompt-sha256 (in the file: gate.prompts).", flag="--prompt-file", cli_type=Path, repeat=True,
           metavar="PATH", attr="prompts.*.path", reproduce=True),
    Option(CLI, "prompt_sha256s", "Pinned SHA-256 of the prompt file given in the same position.",
           flag="--prompt-sha256", repeat=True, metavar="HEX", attr="prompts.*.sha256", reproduce=True),
    _gate("evidence_dir", "Directory that keeps every attempt; finished runs are promoted here and never replaced. "
          "Inside a git checkout it must be ignored (`ds4ci init` adds it to .gitignore; the gate warns otherwise); "
          "the action uses $RUNNER_TEMP/ds4ci-evidence.",
          default_doc="./" + DEFAULT_EVIDENCE_DIR, toml_type="path", cli_type=Path, attr="evidence_dir",
          reproduce=True),
    _gate("results_out", "Also write results.json here (the evidence keeps its own copy).", toml_type="path",
          cli_type=Path),
    _gate("bundle_out", "Also write the sealed evidence as one .tar.gz here, for `ds4ci verify` elsewhere.",
          toml_type="path", cli_type=Path),
    _gate("runner", "Runner name, used in the status context ds4ci/<runner>; overrides runner.name.",
          check=v.runner_name, default_doc="runner.name, else the host name", attr="runner", reproduce=True, metavar="NAME"),
    _gate("widths", "Comma-separated draft widths q to prove, each >= 2 (in the file: a list of integers).",
          check=v.parse_widths, default=DEFAULT_WIDTHS, toml_type="array of integers", recorded="widths",
          attr="widths", reproduce=True, metavar="Q,Q"),
    _gate("max_tokens", "Tokens generated per request (>= 2).", check=v.integer(2), default=96,
          toml_type="integer", cli_type=int, recorded="max_tokens", attr="max_tokens", reproduce=True),
    _gate("seed", "Request seed (an unsigned 64-bit integer).",
          check=v.integer(0, v.MAX_SEED, "the server reads it as an unsigned 64-bit integer; "), default=1234,
          toml_type="integer", cli_type=int, recorded="seed", attr="seed", reproduce=True),
    _gate("repeats", "Requests per prompt on every server (lifecycle check).", check=v.integer(1), default=2,
          toml_type="integer", cli_type=int, recorded="repeats", attr="repeats", reproduce=True),
    _gate("require_coverage", "Give no verdict (error, never a pass) for a width whose run did not exercise the "
          "proof's named minimums (per-step "
          "evidence, every accept length, a rollback across a ratio-4 boundary, ratio-128 and sliding-window "
          "batches; docs/results.md). On in the config of `ds4ci tiny-models`.", check=v.boolean, default=False,
          toml_type="boolean", flag=None, recorded="require_coverage", attr="require_coverage"),
    _gate("text_parity", "Where the build gives no token-ID oracle, judge parity on the answers' text, labelled "
          "\"text parity\" (never token parity; docs/protocol.md). Off by default: then such a build gets an error.",
          check=v.boolean, default=False, toml_type="boolean", flag=None, recorded="text_parity", attr="text_parity"),
    _gate("target_device", "Server --target-device, e.g. hip:0 or cuda:0.", check=v.device, default="hip:0",
          recorded="target_device", attr="target_device", reproduce=True, metavar="DEVICE"),
    _gate("devices", "Devices to spread the arms over (target-only and one per width), one arm per device at a "
          "time unless parallel says more; each arm's server gets its device as --target-device (counted within "
          "CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES where the runner sets one). Same kind as target_device, "
          "each listed once, no more than the arms (comma-separated as a flag).", check=v.parse_devices,
          default_doc="target_device alone", toml_type="array of strings", recorded="devices", attr="devices",
          record_attr="arm_devices", reproduce=True, metavar="DEVICE,DEVICE"),
    _gate("parallel", "Arms running side by side on each device (>= 1, at most the number of arms). Above 1 only "
          "with ds4ci's tiny models (`ds4ci tiny-models`, known by the target's SHA-256): a real model takes a "
          "whole GPU, so one real-model arm per device.", check=v.integer(1), default=1, toml_type="integer",
          cli_type=int, recorded="parallel", attr="parallel", reproduce=True),
    _gate("max_ctx", "Server --max-ctx.", check=v.integer(1), default=4096, toml_type="integer", cli_type=int,
          recorded="max_ctx", attr="max_ctx", reproduce=True),
    _gate("chunk", "Server --chunk.", check=v.integer(1), default=512, toml_type="integer", cli_type=int,
          recorded="chunk", attr="chunk", reproduce=True),
    _gate("mmvq_max_ncols", "LUCE_MMVQ_MAX_NCOLS for every arm; must be >= the largest width.",
          check=v.integer(1), default_doc="largest width", toml_type="integer", cli_type=int,
          recorded="mmvq_max_ncols", attr="mmvq_max_ncols", reproduce=True),
    _gate("startup_timeout", "Seconds a server may take to answer /health.", check=v.seconds, default=600.0,
          toml_type="number", cli_type=float, recorded="startup_timeout_s", attr="startup_timeout_s",
          reproduce=True),
    _gate("request_timeout", "Seconds one completion request may take.", check=v.seconds, default=600.0,
          toml_type="number", cli_type=float, recorded="request_timeout_s", attr="request_timeout_s",
          reproduce=True),
    _gate("stop_timeout", "Seconds between SIGTERM and SIGKILL of a server's process group (freeing an 86 GB "
          "model takes tens of seconds).", check=v.seconds, default=60.0, toml_type="number", cli_type=float,
          recorded="stop_timeout_s", attr="stop_timeout_s", reproduce=True),
    _gate("hash_cache", "Trust the SHA-256 cache for big files (--no-hash-cache: re-read every file).",
          check=v.boolean, default_doc="true, but under GitHub Actions only with hash_cache_path set",
          toml_type="boolean", flag="--no-hash-cache", switch=False, cli_type=bool,
          flag_doc="Re-read every file instead of trusting the hash cache."),
    _gate("hash_cache_path", "The hash cache file to use (e.g. a root-owned one that PR code cannot write).",
          toml_type="path", flag=None),
    _gate("stale_override_files", "Files that silently change server policy when present; the gate refuses to "
          "run while one exists.", check=v.paths, default=DEFAULT_STALE_OVERRIDE_FILES,
          toml_type="array of paths", flag=None),
    _gate("device_args", "Device-dependent server arguments, replacing the defaults (HIP: "
          f"{' '.join(HIP_DEVICE_ARGS)}; others: {' '.join(OTHER_DEVICE_ARGS)}).", check=v.server_args,
          default_doc="by target_device", toml_type="array of strings", flag=None, recorded="server_args",
          attr="device_args", record_attr="server_args_all"),
    _gate("server_args", "Extra server argument, appended after the device defaults; repeat for several "
          "(write --server-arg=--flag for values starting with '-').", check=v.server_args,
          default=(), toml_type="array of strings", flag="--server-arg", repeat=True, metavar="ARG",
          attr="server_args", recorded="server_args", record_attr="server_args_all", reproduce=True),
    _gate("env_prefixes", f"Environment variable prefixes passed to the server ({', '.join(ENV_PREFIXES)}).",
          check=v.env_prefixes, default=ENV_PREFIXES, toml_type="array of strings", flag=None,
          recorded="env_prefixes", attr="env_prefixes"),
    _gate("log_cap_mib", "Cap in MiB on each server log stream, on each check's and the build's log, and on the "
          "server's /tmp (a tmpfs of that size under bubblewrap 0.7 or later); reaching it is an error (log flood, "
          "scratch flood), and a check or build log says where it was cut.",
          check=v.integer(1), default=512, toml_type="integer", cli_type=int, recorded="log_cap_mib",
          attr="log_cap_mib", reproduce=True),
    _gate("calibrations", "Folder of this runner's calibration records (`ds4ci calibrate --out`, or a folder of "
          "them), an absolute path outside the checkout: the gate verifies the latest record of this runner with "
          "these tiny models (signed by this runner's key, derived again) and seals what it found, so the comment "
          "and the check run cite it (docs/calibration.md); a record that does not verify is an error of the run.",
          toml_type="path", cli_type=Path, attr="calibrations", metavar="DIR"),
    _gate("source_dir", "Git checkout of the server source; its revisions are recorded in results.json.",
          toml_type="path", cli_type=Path, attr="source_dir", reproduce=True),
    _gate("base_ref", "Base ref for the revisions record (with --source-dir).", check=v.git_ref,
          attr="base_ref", reproduce=True, metavar="REF"),
    _gate("upstream_ref", "Upstream main ref for the revisions record (with --source-dir).", check=v.git_ref,
          attr="upstream_ref", reproduce=True, metavar="REF"),
    _gate("allow_dirty_tree", "Let a run whose source checkout has uncommitted changes to tracked files "
          "(revisions.dirty) pass: the binary is then not the commit's. Either way the comment and the status say "
          "\"built from a modified tree\"; without it such a run is an error. publish --expect-config accepts it "
          "only when the trusted config sets it.", check=v.boolean, default=False, toml_type="boolean",
          flag="--allow-dirty-tree", switch=True, cli_type=bool, recorded="allow_dirty_tree",
          attr="allow_dirty_tree", reproduce=True),
    Option(CLI, "notes", "A note for reviewers, recorded as a warning in results.json and shown in the comment "
           "(e.g. that the PR's own ds4ci.toml was not used); repeatable.", check=v.notes, flag="--note",
           repeat=True, metavar="TEXT"),
    Option(CLI, "no_build", "Skip the [build] step and use an existing binary (--server-bin or gate.server_bin).",
           flag="--no-build", switch=True, cli_type=bool),
    Option(CLI, "json", "Print a JSON summary (verdict, exit code, evidence, per-width verdicts) on stdout; "
           "the table and progress go to stderr.", flag="--json", switch=True, cli_type=bool),
    Option(CLI, "junit_xml", "Also write the run as JUnit XML here (one testcase per width and prompt, plus the build, "
           "each check and the verdict; the reason is the failure message), for dorny/test-reporter or "
           "EnricoMi/publish-unit-test-result-action.", flag="--junit-xml", cli_type=Path, metavar="PATH"),
    Option("runner", "name", "This runner's name (the gate's --runner and gate.runner win).", check=v.runner_name,
           default_doc="the host name"),
    Option("runner", "role", "gate: prove parity; negative-control: run the extra checks only (no models).",
           check=v.one_of(v.RUNNER_ROLES), default="gate", runner_table=True),
    Option("runner", "gpu", "The GPU this runner must have: an architecture (gfx1151, sm_90) or part of its name "
           "(H200), or a list of them (any one); preflight and the gate stop with an error when the fingerprint "
           "shows no such GPU.", check=v.gpu_names, default=(), toml_type="string or array of strings",
           runner_table=True, attr="gpu"),
    Option("runner", "negative_control_for", "The gate runner this negative control stands beside.",
           check=v.text, runner_table=True),
    Option("runner", "labels", "The labels a workflow job's runs-on needs to reach this runner; the gate "
           "workflow's matrix takes them from `ds4ci config runners`.", check=v.runner_labels,
           default_doc='["self-hosted", "<runner name>"]', toml_type="array of strings", runner_table=True),
    Option("build", "command", "Shell command that builds the server under test, e.g. \"cmake --build build -j\" "
           "(required in [build]).", check=v.command),
    Option("build", "server_bin", "The binary the build produces: the one hashed, recorded and started "
           "(required in [build]).", toml_type="path"),
    Option("build", "cwd", "Directory the build runs in.", default_doc="the config file's directory",
           toml_type="path"),
    Option("build", "timeout", "Seconds the build may take.", check=v.seconds, default=DEFAULT_BUILD_TIMEOUT_S,
           toml_type="number"),
    Option("checks", "name", "The check's name, unique among [[checks]] (required).", check=v.text),
    Option("checks", "command", "Shell command to run (required).", check=v.command),
    Option("checks", "parser", f"How to read the outcome: one of {', '.join(v.CHECK_PARSERS)}.",
           check=v.one_of(v.CHECK_PARSERS), default="exit-code"),
    Option("checks", "report", "JUnit XML file the command writes (needed by parser junit).", toml_type="path"),
    Option("checks", "timeout", "Seconds the check may take.", check=v.seconds, default=DEFAULT_CHECK_TIMEOUT_S,
           toml_type="number"),
    Option("checks", "cwd", "Directory the check runs in.", default_doc="the config file's directory",
           toml_type="path"),
    Option("runner", "public_key", "The runner's Ed25519 public key (the line `ds4ci runner-key init` prints), or "
           "a list of two while a key is rotated: verify and publish then accept only bundles whose "
           "attestation.json such a key signed.", check=v.public_keys, toml_type="string or array of strings",
           runner_table=True),
    _gate("signing_key", "Private key that signs the bundle's attestation.json (made by `ds4ci runner-key init`; "
          "keep it where PR code cannot read it).", default_doc="the runner-key default path, when that file exists",
          toml_type="path", cli_type=Path, attr="signing_key"),
    _gate("signing", "Whose key signs under GitHub Actions: \"service\" (the gate service's, which no job can read: a "
          "gate in a job that would sign with a key the job's own user can read refuses, exit 2) or \"job-key\" (sign "
          "with such a key on purpose; every step of every job on that runner can read it too). The report says which "
          "signed (docs/service.md).", check=v.one_of(SIGNING_KINDS), default="service", flag=None, attr="signing"),
    Option(CLI, "service_state", "The gate service's state folder, passed by `ds4ci service run` (docs/service.md): no "
           "path of the config may lie in it or in the signing key's folder, a pin mismatch shows no digest found, and "
           "the signature is recorded as the service's.", flag="--service-state", cli_type=Path, metavar="DIR",
           attr="service_state"),
    Option("sandbox", "require", "Refuse to run PR code (server, build, checks) unless bubblewrap runs here; "
           "the gate stops with exit 3 before any PR process starts.", check=v.boolean,
           default_doc="true under GitHub Actions, else false", toml_type="boolean", runner_table=True),
    Option("sandbox", "enabled", "Run PR code under bubblewrap where it works (false: only the PID namespace or "
           "subreaper levels; refused together with require = true).", check=v.boolean, default=True,
           toml_type="boolean", runner_table=True),
    Option("sandbox", "ro_paths", "Extra paths PR code may read (read-only binds), beyond the default view.",
           check=v.paths, default=(), toml_type="array of paths", runner_table=True),
    Option("sandbox", "rw_paths", "Extra paths PR code may write (binds), beyond its scratch folder.",
           check=v.paths, default=(), toml_type="array of paths", runner_table=True),
    Option("sandbox", "devices", "Extra device nodes (globs) beyond the standard ones and the GPU's "
           "(/dev/kfd, /dev/dri, /dev/nvidia*, /dev/nvidia-caps).", check=v.paths, default=(),
           toml_type="array of paths", runner_table=True, dest="sandbox_devices"),
    Option("sandbox", "cpu_online", "Show the server, in its sandbox, only its own CPUs as online: a read-only file "
           "listing the CPUs of the gate's affinity is bound over /sys/devices/system/cpu/online, so a server that "
           "sizes its thread pools by the CPUs online (glibc's get_nprocs, which ignores the affinity) sizes them by "
           "its CPU set. For gates side by side on disjoint CPU sets (`ds4ci calibrate --cpu-sets affinity+online`).",
           check=v.boolean, default=False, toml_type="boolean", runner_table=True, flag="--sandbox-cpu-online",
           switch=True, cli_type=bool),
    Option("merge", "runners", "Gate runners whose ds4ci/<runner> status must be success on the head.",
           toml_type="array of strings", flag="--runner", command="merge-check", repeat=True, metavar="NAME"),
    Option("merge", "checks", "Check runs or commit status contexts that must succeed on the head: a name (a "
           f"check run of the app {DEFAULT_CHECK_APP!r} or a status by the publisher) or a [[merge.checks]] table; "
           "on the command line NAME@APP names the app too (--check cubic@cubic-dev-ai: only that app's check run "
           "counts).",
           toml_type="array of strings or tables", flag="--check", command="merge-check", repeat=True,
           metavar="NAME"),
    Option("merge", "approvals", "Approving reviews required on the head.", check=v.integer(0),
           default=DEFAULT_APPROVALS, toml_type="integer", flag="--approvals", command="merge-check", cli_type=int),
    Option("merge", "publisher", "The account whose ds4ci/<runner> statuses count (the one `ds4ci publish` posts "
           "as); statuses from anyone else are listed as ignored.", check=v.text, default=DEFAULT_PUBLISHER,
           flag="--publisher", command="merge-check", metavar="LOGIN"),
    Option("merge", "workflow", "The trusted gate's workflow file: a ds4ci/<runner> success counts only when it links "
           "(target_url) a run that GitHub says ran this file of the default branch (pull_request_target, for a pull "
           "request into any branch, or workflow_dispatch on it), for the head; any other is listed as ignored "
           "(docs/security.md).", check=v.text,
           default=".github/workflows/gate.yml", flag="--trusted-workflow", command="merge-check", metavar="PATH"),
    Option("merge", "calibration_max_age_days", "When above 0: each gate runner's calibration, as recorded by the "
           "trusted gate's run that vouched for its green (its artifact ds4ci-calibrated--<runner>=<day>, from the "
           "verified bundle's citation; docs/merging.md), is no older than this many days; 0 requires none.",
           check=v.integer(0), default=0, toml_type="integer"),
    Option("merge", "vouch", "Which of GitHub's records vouches for a ds4ci/<runner> success (docs/merging.md): "
           "\"workflow\" (the run of merge.workflow that the status links, looked up: pull_request_target or "
           "workflow_dispatch on the default branch, from a commit of that branch, titled with the head, its job `verdict "
           "<runner>` concluded success in its latest attempt; the newest such run decides) or \"publisher\" (a check "
           "run ds4ci/<runner> created by the GitHub App merge.vouch_app_id, whose key no job holds).",
           check=v.one_of(VOUCH_KINDS), default="workflow"),
    Option("merge", "vouch_app_id", "With vouch = \"publisher\": the app.id of the GitHub App whose check runs "
           "vouch (its private key kept by the gate service, out of every job's reach).", check=v.integer(1),
           toml_type="integer"),
    Option("merge.checks", "name", "The check run's name or the commit status context (required).", check=v.text),
    Option("merge.checks", "app", "The GitHub App (app.slug) whose check runs of this name count.", check=v.text,
           default=DEFAULT_CHECK_APP),
    Option("merge.checks", "creator", "The account (creator.login) whose commit statuses of this name count.",
           check=v.text, default_doc="merge.publisher"),
    Option("publish", "check_runs", "Besides the ds4ci/<runner> commit statuses, create or update one check run of that "
           "name per runner (the Checks tab: summary, annotations on the PR's own files). Needs the permission "
           "`checks: write` and a GitHub App token (the Actions GITHUB_TOKEN is one).", check=v.boolean, default=True,
           toml_type="boolean"),
    Option("publish", "comment_mode", "When the sticky pull-request comment is written: \"always\"; \"failures\" (created "
           "only when a runner's status is not success; one that exists is still updated, so it never keeps an old "
           "failure); \"off\" (never, as --no-comment). The statuses and check runs are set either way.",
           check=v.one_of(COMMENT_MODES), default="always", flag="--comment-mode", command="publish", metavar="MODE"),
    Option("preflight", "busy_wait", "Seconds to wait for a GPU busy with another process to become free.",
           check=v.wait_seconds, default=0.0, toml_type="number", flag="--busy-wait", command="preflight",
           cli_type=float),
)
OPTION_SECTIONS = ("gate", "runner", "build", "checks", "merge", "publish", "preflight", "sandbox")
TOP_KEYS = (*OPTION_SECTIONS, "runners")
NESTED_SECTIONS = ("merge.checks",)  # tables inside a section's key, documented after their section


def in_section(section: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if o.section == section)


def keys(section: str) -> frozenset[str]:
    """The keys a ``[section]`` table may hold (``runners``: what a ``[runners.<name>]`` table may set)."""
    if section == "runners":
        return frozenset(o.key for o in OPTIONS if o.runner_table)
    return frozenset(o.key for o in in_section(section))


def get(section: str, key: str) -> Option:
    for option in in_section(section):
        if option.key == key:
            return option
    raise KeyError(f"{section}.{key}")


def for_command(command: str) -> Iterator[Option]:
    return (o for o in OPTIONS if o.flag is not None and o.command == command)


def overrides(command: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A command's parsed flags as loader overrides (setting name -> value; None: not given)."""
    out: dict[str, Any] = {}
    for option in for_command(command):
        value = params.get(option.param)
        if option.switch is not None:
            value = option.switch if value else None
        out[option.name] = value
    return out


def default_device_args(target_device: str) -> tuple[str, ...]:
    return HIP_DEVICE_ARGS if target_device.startswith("hip:") else OTHER_DEVICE_ARGS

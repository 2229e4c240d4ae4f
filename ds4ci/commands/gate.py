"""``ds4ci gate``: config in, gate run, table out, results.json written, exit code back."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ds4ci.commands.gate_outputs import warn_evidence_in_checkout, write_step_summary
from ds4ci.errors import Ds4ciError, NoVerdictError, UsageError
from ds4ci.evidence import store
from ds4ci.gate.run import GateOutcome, run_gate
from ds4ci.gate.signer import Safeguards, signer
from ds4ci.log import Logger
from ds4ci.options import config, protected
from ds4ci.records import Results
from ds4ci.textsafe import json_text

# Write credentials a GitHub job may carry. The gate runs the pull request's code (the server it
# builds) as the same user, which can read ds4ci's environment through /proc/<pid>/environ.
WRITE_CREDENTIALS = ("GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


def refuse_credentials(environ: Mapping[str, str], log: Logger) -> None:
    """Under Actions a credential in ds4ci's own environment is refused; elsewhere it is a warning."""
    present = [name for name in WRITE_CREDENTIALS if environ.get(name)]
    if not present:
        return
    message = (
        f"{', '.join(present)} is set in the gate's environment, where the server under test (code from the "
        "pull request) could read it from /proc/<pid>/environ; remove it from this job's env (the gate job "
        "needs no token: publish from a separate job with `ds4ci verify` + `ds4ci publish`)"
    )
    if environ.get("GITHUB_ACTIONS") == "true":
        raise UsageError(message)
    log.warning(message)


def _toml_line(exc: BaseException) -> int | None:
    """The line of a TOML syntax error (tomllib says "(at line N, column M)"); None for any other error."""
    match = re.search(r"\(at line (\d+), column \d+\)", str(exc.__cause__ or ""))
    return int(match.group(1)) if match else None


def summary(doc: Results, cfg: config.GateConfig) -> dict[str, Any]:
    """``ds4ci gate --json``: the outcome in one object (the full document is results.json)."""
    return {
        "verdict": doc["verdict"],
        "exit_code": doc["exit_code"],
        "runner": doc["runner"]["name"],
        "scope": doc["settings"].get("scope"),
        "reasons": doc["reasons"],
        "evidence": {"dir": doc["evidence"]["dir"], "manifest_sha256": doc["evidence"]["manifest_sha256"]},
        "results_out": str(cfg.results_out) if cfg.results_out is not None else None,
        "bundle_out": str(cfg.bundle_out) if cfg.bundle_out is not None else None,
        "widths": {str(w["q"]): w["verdict"] for w in doc["widths"]},
    }


def _writable_file_open() -> bool:
    """Is a regular file other than stdin/stdout/stderr open for writing? (True when it cannot tell.)"""
    try:
        fds = [int(entry.name) for entry in Path("/proc/self/fd").iterdir()]
    except OSError:
        return True
    for fd in fds:
        try:
            regular = fd > 2 and stat.S_ISREG(os.fstat(fd).st_mode)
            writable = regular and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
        except OSError:  # closed meanwhile (the fd that listed the directory)
            continue
        if writable:
            return True
    return False


def prepare_quick_exit() -> bool:
    """Let the interpreter exit in milliseconds instead of ~0.2 s, losing nothing; True if it will.

    At shutdown CPython runs full collections over every object of every module loaded (typer,
    pydantic, jsonschema: hundreds of thousands of objects); frozen objects are never traversed.
    A frozen object is still freed by reference counting and atexit handlers still run; only a
    buffered file held by a reference cycle would no longer be flushed at exit, so the heap is
    frozen only when no file but stdio is open for writing (every evidence file is closed by then),
    and stdout and stderr are flushed here, as the interpreter does again at exit.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if _writable_file_open():
        return False
    gc.freeze()
    return True


def run_from_flags(params: Mapping[str, Any]) -> int:
    """``ds4ci gate`` from its parsed flags (parameter name -> value), by either parser."""
    from ds4ci.options.table import overrides as flag_overrides

    overrides = flag_overrides("gate", params)
    config_file, as_json = overrides.pop("config_file"), bool(overrides.pop("json"))
    junit_xml = overrides.pop("junit_xml")
    from ds4ci.options import configpath

    return run_gate_command(configpath.resolve(config_file, "gate"), overrides, as_json=as_json, junit_xml=junit_xml)


def run_gate_command(config_file: Path | None, overrides: Mapping[str, Any], as_json: bool = False,
                     junit_xml: Path | None = None) -> int:
    """Human lines (the table, output paths) go to stdout, or to stderr with ``as_json``."""
    if junit_xml is not None and junit_xml.is_dir():
        raise UsageError(f"--junit-xml {junit_xml} is a directory; expected a file path such as ds4ci-junit.xml")
    try:
        return _run_gate_command(config_file, overrides, as_json, junit_xml)
    finally:
        prepare_quick_exit()


def _run_gate_command(config_file: Path | None, overrides: Mapping[str, Any], as_json: bool,
                      junit_xml: Path | None) -> int:
    log = Logger.from_env()
    try:
        refuse_credentials(os.environ, log)
    except UsageError as exc:  # the CLI prints the error; under Actions it is an annotation as well
        log.annotate("error", str(exc), title="ds4ci gate")
        raise
    try:
        cfg = config.load(config_file, overrides)
    except Ds4ciError as exc:
        from ds4ci.gate.annotations import annotation_path

        where = annotation_path(config_file) if config_file is not None else None
        log.annotate("error", str(exc), file=where, line=_toml_line(exc) if where else None, title="ds4ci gate: config")
        raise
    warn_evidence_in_checkout(cfg.evidence_dir, log)
    signing_key = _signing_key(cfg)  # a bad key is a usage error before anything runs
    guard = protected.protected_for(cfg, signing_key)
    try:  # before anything runs or is read: no config path reaches the key's folder or the service's state
        refuse_outputs_in_checkout(cfg, junit_xml)
        protected.refuse(cfg, overrides, guard)
        signing = signer(cfg, signing_key)
    except UsageError as exc:
        log.annotate("error", str(exc), title="ds4ci gate: config")
        raise
    outcome = run_gate(cfg, log, Safeguards(guard, signing, runner_keys(cfg, signing_key)))
    if signing_key is not None:
        _sign(outcome, signing_key, log)
    from ds4ci.report import table  # imported once the run is over: the first progress line comes sooner

    human = sys.stderr if as_json else sys.stdout
    print(table.render(outcome.results), file=human)
    write_step_summary(outcome.results, log)
    try:
        _write_outputs(cfg, outcome, human)
        _write_junit(outcome.results, junit_xml, human)
    except Ds4ciError as exc:  # the verdict cannot stand without its files: say why, not the verdict
        log.annotate("error", str(exc), title="ds4ci gate")
        raise
    from ds4ci.gate.annotations import announce  # judging's line formats: needed only now

    announce(log, outcome.results)
    if as_json:
        sys.stdout.write(json_text(json.dumps(summary(outcome.results, cfg), indent=2, sort_keys=True)) + "\n")
    return outcome.exit_code


def refuse_outputs_in_checkout(cfg: config.GateConfig, junit_xml: Path | None) -> None:
    """--results-out, --bundle-out and --junit-xml name places for the gate's own output: refused inside the tree
    under test (--source-dir, --config-base, any git checkout), where the build may leave a link at the name."""
    from ds4ci.fileio import refuse_inside_checkout
    from ds4ci.gate.views import checkout

    trees = tuple(p for p in (checkout(cfg), cfg.config_base) if p is not None)
    for option, path in (("--results-out", cfg.results_out), ("--bundle-out", cfg.bundle_out),
                         ("--junit-xml", junit_xml)):
        if path is not None:
            refuse_inside_checkout(path, option, trees)


def _signing_key(cfg: config.GateConfig) -> Path | None:
    """--signing-key (gate.signing_key), else the runner-key default path when that file exists; checked now,
    and the signing code imported now, before any PR process starts (like ``ds4ci.gate.preload``)."""
    from ds4ci.evidence import attestation, keys  # noqa: F401 - attestation: imported before PR code runs

    path = cfg.signing_key if cfg.signing_key is not None else keys.default_path()
    if cfg.signing_key is None and not path.exists():
        return None
    keys.load_private(path)
    return path


def runner_keys(cfg: config.GateConfig, signing_key: Path | None) -> tuple[str, ...]:
    """This runner's public keys: the signing key's and those the trusted config names for it (a calibration record
    the gate cites must be signed by one)."""
    if cfg.calibrations is None:
        return ()
    from ds4ci.evidence import attestation, keys

    found = [keys.public_line(keys.load_private(signing_key).public_key())] if signing_key is not None else []
    if cfg.config_file is not None:
        named = attestation.trusted_keys(cfg.config_file)
        found += [*named.get(attestation.ANY_RUNNER, ()), *named.get(cfg.runner, ())]
    return tuple(dict.fromkeys(found))


def _sign(outcome: GateOutcome, key: Path, log: Logger) -> None:
    """attestation.json into the sealed evidence (before --bundle-out archives it)."""
    doc = outcome.results
    if doc["evidence"]["manifest_sha256"] is None:
        return  # nothing sealed, nothing to vouch for
    from ds4ci.evidence import attestation

    try:
        written = attestation.sign(Path(doc["evidence"]["dir"]), key)
    except (OSError, ValueError) as exc:
        raise NoVerdictError(f"cannot sign the evidence with {key}: {exc}") from exc
    log(f"signed: {written}")


def _write_junit(doc: Results, path: Path | None, human: TextIO) -> None:
    if path is None:
        return
    from ds4ci.report import junit

    try:
        junit.write(doc, path)
    except OSError as exc:
        raise NoVerdictError(f"cannot write --junit-xml {path}: {exc.strerror or exc}") from exc
    print(f"junit: {path}", file=human)


def _write_outputs(cfg: config.GateConfig, outcome: GateOutcome, human: TextIO) -> None:
    """--results-out and --bundle-out, when asked for."""
    doc = outcome.results
    if cfg.results_out is not None:
        try:
            outcome.write_results(cfg.results_out)
        except OSError as exc:
            raise NoVerdictError(f"cannot write --results-out {cfg.results_out}: {exc.strerror or exc}") from exc
        print(f"results: {cfg.results_out}", file=human)
    if cfg.bundle_out is not None:
        final = Path(doc["evidence"]["dir"])
        if doc["evidence"]["manifest_sha256"] is None:
            raise NoVerdictError(f"no sealed evidence to archive as --bundle-out {cfg.bundle_out}; see {final}")
        from ds4ci.evidence import bundle  # tarfile and gzip, only for --bundle-out

        try:
            bundle.write_archive(final, cfg.bundle_out, store.sealed_files(final))
        except OSError as exc:
            raise NoVerdictError(f"cannot write --bundle-out {cfg.bundle_out}: {exc.strerror or exc}") from exc
        print(f"bundle: {cfg.bundle_out}", file=human)

"""Value checkers for settings: one function per kind of value, each naming what it expected.

Every checker takes the raw value (from TOML or the command line) and ``where`` (the key or flag
named in the error) and returns the checked value or raises ``UsageError``. The limits they
enforce are facts about options and live here, once.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options.policy import ENV_PREFIXES

Checker = Callable[[Any, str], Any]

MAX_SECONDS = 7 * 24 * 3600.0
MAX_SEED = 2**64 - 1  # the server reads seed as uint64
MAX_WIDTH = 64
MAX_NOTE_CHARS = 2000
# ds4ci sets these itself on every server; server_args may not repeat them.
OWNED_SERVER_FLAGS = ("--host", "--port", "--max-ctx", "--chunk", "--target-device")
CHECK_PARSERS = ("junit", "ctest", "build-progress", "compute-sanitizer", "exit-code")
RUNNER_ROLES = ("gate", "negative-control")
# What `ds4ci init` writes for a pin it cannot compute (the file is not on this machine).
PIN_PLACEHOLDER_START = "TODO"
PIN_PLACEHOLDER = "TODO: the file's SHA-256 (sha256sum FILE)"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
RUNNER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A self-hosted runner label (what a job's runs-on names).
RUNNER_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# The ds4ci a workflow runs: OWNER/NAME@REF of ds4ci's own repository, REF a tag (v0.1.0) or a full commit.
# The workflows' pin check (.github/workflows/gate.yml, report.yml) states the same pattern in bash.
DS4CI_REF = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@([0-9a-f]{40}|v[0-9][A-Za-z0-9._+-]*)$")
# What `ds4ci init` writes into the workflows when no --ds4ci-ref is given.
DS4CI_REF_PLACEHOLDER = "TODO: OWNER/ds4ci@vX.Y.Z (ds4ci init --ds4ci-ref)"
_DEVICE = re.compile(r"^[a-z]+:\d+$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """TOML text read as a table; ``where`` names it in the error."""
    if sys.version_info >= (3, 11):  # imported here: `ds4ci --help` reads no TOML
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    try:
        loaded: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where} is not valid TOML: {exc}") from exc
    return loaded


def read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # imported here: `ds4ci --help` reads no TOML
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
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


def expand_vars(text: str, where: str) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        value = os.environ.get(name)
        if not value:
            raise UsageError(f"{where}: ${{{name}}} is used but the environment variable {name} is not set")
        return value

    return _VAR.sub(repl, text)


def path(value: Any, where: str, base: Path | None = None) -> Path:
    """A path; from a file it may use ``${VAR}`` and is relative to ``base`` (the file's directory)."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: expected a path string, found {value!r}")
    found = Path(expand_vars(value, where)).expanduser()
    if base is not None and not found.is_absolute():
        found = base / found
    return found


def parse_sha256(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.startswith(PIN_PLACEHOLDER_START):
        raise UsageError(
            f"{where}: not pinned yet ({value!r} is the placeholder `ds4ci init` writes for a file it could not "
            "read); put the file's SHA-256 there (`sha256sum FILE` on the runner that has it, or "
            "`ds4ci pin` there: it rewrites the pins only)"
        )
    if not isinstance(value, str) or not _HEX64.match(value.strip().lower()):
        raise UsageError(f"{where}: expected 64 hexadecimal characters (a SHA-256), found {value!r}")
    return value.strip().lower()


def integer(minimum: int, maximum: int | None = None, why: str = "") -> Checker:
    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{where}: expected an integer, found {value!r}")
        if value < minimum:
            raise UsageError(f"{where}: expected an integer >= {minimum}, found {value}")
        if maximum is not None and value > maximum:
            raise UsageError(f"{where}: {why}expected at most {maximum}, found {value}")
        return value

    return check


def seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{where}: expected a positive, finite number of seconds, found {value!r}")
    if value > MAX_SECONDS:
        raise UsageError(f"{where}: expected at most {MAX_SECONDS:g} seconds (7 days), found {value!r}")
    return float(value)


def wait_seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{where}: expected a number of seconds >= 0, found {value!r}")
    return float(value)


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{where}: expected true or false, found {value!r}")
    return value


def text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: expected a non-empty string, found {value!r}")
    return value


def command(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: expected a non-empty shell command, e.g. \"cmake --build build -j\"")
    return value


def strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{where}: expected a list of non-empty strings, found {value!r}")
    return tuple(value)


def paths(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise UsageError(f"{where}: expected a list of paths, found {value!r}")
    return tuple(value)


def server_args(value: Any, where: str) -> tuple[str, ...]:
    args = strings(value, where)
    owned = [a for a in args if a.split("=", 1)[0] in OWNED_SERVER_FLAGS]
    if owned:
        raise UsageError(
            f"{where}: {', '.join(owned)} is set by ds4ci itself (from target, max_ctx, chunk, target_device); "
            "remove it from the extra arguments"
        )
    return args


def env_prefixes(value: Any, where: str) -> tuple[str, ...]:
    prefixes = strings(value, where)
    wrong = [p for p in prefixes if p not in ENV_PREFIXES]
    if wrong or not prefixes or len(set(prefixes)) != len(prefixes):
        raise UsageError(
            f"{where}: expected one or both of {', '.join(ENV_PREFIXES)} (each once), found {list(prefixes)}"
        )
    return prefixes


def interpreters(value: Any, where: str) -> tuple[str, ...]:
    found = strings(value, where)
    if any(not p.startswith("/") or len(p) > 200 for p in found) or len(set(found)) != len(found):
        raise UsageError(f"{where}: expected absolute interpreter paths (such as /bin/sh), each once, found {list(found)}")
    return found


def notes(value: Any, where: str) -> tuple[str, ...]:
    found = strings(value, where) if value else ()
    if any(len(n) > MAX_NOTE_CHARS or "\n" in n for n in found):
        raise UsageError(f"{where}: expected one line of at most {MAX_NOTE_CHARS} characters each")
    return found


def device(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _DEVICE.match(value):
        raise UsageError(f"{where}: expected a device like hip:0 or cuda:0, found {value!r}")
    return value


def parse_devices(value: Any, where: str = "devices") -> tuple[str, ...]:
    """``["cuda:0", "cuda:1"]`` (in the file) or ``cuda:0,cuda:1`` (a flag): distinct devices of one kind."""
    items = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise UsageError(f"{where}: expected a non-empty list of devices like [\"cuda:0\", \"cuda:1\"], found {value!r}")
    devices = tuple(device(item, where) for item in items)
    twice = sorted({d for d in devices if devices.count(d) > 1})
    if twice:
        raise UsageError(f"{where}: {', '.join(twice)} listed twice in {list(devices)}; each device is listed once "
                         "(several arms on one device: gate.parallel)")
    kinds = sorted({d.split(":", maxsplit=1)[0] for d in devices})
    if len(kinds) > 1:
        raise UsageError(f"{where}: devices of one kind expected (the server arguments follow the kind), found "
                         f"{', '.join(kinds)} in {list(devices)}")
    return devices


def git_ref(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("-"):
        raise UsageError(f"{where}: expected a git ref, found {value!r}")
    return value


def runner_labels(value: Any, where: str) -> tuple[str, ...]:
    """``["self-hosted", "gfx1151"]``: the labels a workflow job's runs-on needs to reach the runner."""
    if not isinstance(value, list) or not value or not all(isinstance(i, str) and RUNNER_LABEL.match(i) for i in value):
        raise UsageError(f"{where}: expected a non-empty list of runner labels like [\"self-hosted\", \"gfx1151\"], "
                         f"found {value!r}")
    if len(set(value)) != len(value):
        raise UsageError(f"{where}: a label is listed twice in {value!r}")
    return tuple(value)


def ds4ci_ref(value: Any, where: str) -> tuple[str, str]:
    """``OWNER/NAME@REF`` of ds4ci's repository: (repository, ref); REF a tag like v0.1.0 or a full commit."""
    if not isinstance(value, str) or not DS4CI_REF.match(value):
        raise UsageError(f"{where}: expected OWNER/NAME@REF of ds4ci's repository, REF a tag like v0.1.0 or a full "
                         f"40-hex commit, e.g. acme/ds4ci@v0.1.0, found {value!r}")
    repository, _, ref = value.partition("@")
    return repository, ref


def runner_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not RUNNER_NAME.match(value):
        raise UsageError(
            f"{where}: expected letters, digits, '.', '_' or '-' (max 63, used in ds4ci/<runner>), found {value!r}"
        )
    return value


def one_of(choices: tuple[str, ...]) -> Checker:
    def check(value: Any, where: str) -> str:
        if value not in choices:
            raise UsageError(f"{where}: expected one of {', '.join(choices)}, found {value!r}")
        return str(value)

    return check


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
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise UsageError(f"{where}: expected a list of integers, found {value!r}")
    widths = tuple(integer(2)(item, where) for item in items)
    if not widths:
        raise UsageError(f"{where}: expected at least one width")
    if len(set(widths)) != len(widths):
        raise UsageError(f"{where}: width listed twice in {list(widths)}; each width is proven once")
    if max(widths) > MAX_WIDTH:
        raise UsageError(f"{where}: widths above {MAX_WIDTH} are not supported, found {max(widths)}")
    return widths


def gpu_names(value: Any, where: str) -> tuple[str, ...]:
    """``"gfx1151"`` or ``["sm_90", "H200"]``: the GPU this runner must have (any one of the list)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise UsageError(f"{where}: expected a GPU architecture or name like \"gfx1151\" or [\"sm_90\", \"H200\"], "
                         f"found {value!r}")
    return tuple(i.strip() for i in items)
PUBLIC_KEY_PREFIX = "ed25519:"


def public_key_line(value: Any, where: str) -> str:
    """``ed25519:<base64 of the 32-byte raw public key>``, as ``ds4ci runner-key init`` prints it."""
    if not isinstance(value, str) or not value.startswith(PUBLIC_KEY_PREFIX):
        raise UsageError(f"{where}: expected \"{PUBLIC_KEY_PREFIX}<base64>\" (ds4ci runner-key init prints it), found {value!r}")
    try:
        raw = base64.b64decode(value[len(PUBLIC_KEY_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise UsageError(
            f"{where}: expected the base64 of a 32-byte Ed25519 public key after {PUBLIC_KEY_PREFIX}, found {value!r}"
        )
    return value


def public_keys(value: Any, where: str) -> tuple[str, ...]:
    """One public key line, or a list of them (two while a key is rotated)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UsageError(f"{where}: expected a public key line or a list of them, found an empty list")
    return tuple(public_key_line(item, where) for item in items)


def under_actions() -> bool:
    """Is this a GitHub Actions job (its runner sets ``GITHUB_ACTIONS=true``)?"""
    return os.environ.get("GITHUB_ACTIONS") == "true"

"""Every command's exit codes, declared once: ``docs/exit-codes.md`` is generated from here
(``python -m ds4ci.commands.exitcodes``), each ``--help`` points there, and a test runs every
command to each code it can cheaply reach and checks that its ``--help`` states the same codes.

The meaning is shared (``ds4ci.errors``): 0 pass, 1 fail, 2 usage or configuration error found
before any work, 3 no verdict. Only 0 may ever turn a status green. ``verify`` alone adds 4 and 5.
"""

from __future__ import annotations

import sys
from typing import Final

REGENERATE: Final = "python -m ds4ci.commands.exitcodes > docs/exit-codes.md"
DOC: Final = "docs/exit-codes.md"

SHARED: Final = (
    (0, "pass: the command did what it was asked and the answer is yes (a gate passed, a bundle verifies and "
        "passes, a PR is ready, a file was written)"),
    (1, "fail: a verdict was reached and it is no (the parity contract is violated, a build or check failed, a PR "
        "is not ready)"),
    (2, "usage or configuration error, found before any work: a bad flag, a config file that is missing, malformed "
        "or invalid (a TODO pin included), a path given that does not exist where the command reads it, a refused "
        "input; nothing was run or written"),
    (3, "error, no verdict: the runner is not ready for the config (a pinned file is missing, unreadable or does not "
        "match its pin; a stale override file; no such GPU; the sandbox is required but cannot run), a server "
        "crashed or hung, GitHub could not be asked, or an internal error (one line, never a traceback)"),
)

# command -> (code, what it means for that command); the codes a command can return, no other.
COMMANDS: Final[dict[str, tuple[tuple[int, str], ...]]] = {
    "init": ((0, "written"), (2, "refused: a file exists (without --force), ds4ci.toml holds a key init did not write "
                                  "(with --force), the build's output folder holds tracked files, or a bad name; "
                                  "nothing is written")),
    "upgrade": ((0, "the workflows written"), (2, "refused: a bad ref, or no workflows here; nothing is written")),
    "pin": ((0, "written, or nothing to change"),
            (2, "the file is missing or invalid, or a pin is not on one line of its table; nothing is written")),
    "config check": ((0, "valid"), (2, "invalid: each problem is listed once, every TODO pin named, and what "
                                       "`config runners` or `merge-check` would refuse (a file that names no runner, "
                                       "`[merge] runners = []`)")),
    "config runners": ((0, "printed"), (2, "the file names no runner, or a runner table is invalid")),
    "gate": ((0, "pass"), (1, "fail"), (2, "usage or configuration error (nothing ran)"),
             (3, "error, no verdict: a pinned file missing or not matching its pin, a stale override, a crash or hang, "
                 "a modified source tree (unless gate.allow_dirty_tree)")),
    "bisect": ((0, "found: the first failing commit is named (a bisect sets no status)"),
               (1, "not found: the bad end passes, or the good end fails already (no culprit in the range)"),
               (2, "usage or configuration error (a bad flag, config or ref; nothing ran)"),
               (3, "no verdict: only skipped commits left where the culprit is, an end that cannot be judged, a step "
                   "the gate refused, an interrupt")),
    "calibrate": ((0, "calibrated: the record is written and the unchanged build passed"),
                  (1, "the unchanged build did not pass the gate: the record is written and says why, no mutant ran"),
                  (2, "usage or a refusal before anything is touched: a modified source tree, a substitution that does "
                      "not find its text exactly once, a change of an earlier run still in flight (--restore)"),
                  (3, "no calibration: the unchanged source does not build, an interrupt (the source is put back), "
                      "an internal error")),
    "demo": ((0, "the pass passed and the leak was caught"), (1, "either did not happen"),
             (2, "usage (--keep exists)"), (3, "internal error")),
    "selftest": ((0, "both outcomes as expected"), (1, "one is not"), (2, "usage"),
                 (3, "no verdict (PyTorch missing, or a gate run reached none); with --server-bin: the gate's code")),
    "tiny-models": ((0, "written"), (2, "usage: a bad seed or folder, or gguf not installed")),
    "report": ((0, "written"), (2, "a results file or bundle is missing, invalid or duplicated (nothing written)")),
    "verify": ((0, "every bundle intact, consistent and passing"), (1, "intact and consistent, some failing"),
               (2, "a path that does not exist, or a bad flag"),
               (3, "error: the bundle does not verify (tampered, unreadable, malformed or not a bundle)"),
               (4, "intact and consistent, but the gate reached no verdict (verdict error)"),
               (5, "intact, but sealed with an evidence schema this ds4ci cannot read: the message names the "
                   "install line (from ds4ci's tag vVERSION) of the ds4ci that can")),
    "publish": ((0, "published (a failing gate published correctly is 0 too)"),
                (2, "refused input: nothing is posted"), (3, "error: GitHub failed or refused")),
    "preflight": ((0, "ready"), (2, "usage, or a config file that is invalid (a TODO pin included)"),
                  (3, "error: not ready or busy, each problem listed (a missing file, a wrong pin, ...)")),
    "revisions": ((0, "printed"), (2, "not a git checkout, or a ref that names no commit"), (3, "git failed")),
    "rehearse": ((0, "green: every event set its ds4ci/<runner> statuses and all are success"),
                 (1, "red: a status is failure (a verdict, and it is no)"),
                 (2, "usage: act not installed, not a git repository, no gate.yml or no DS4CI_REF in it, a head or "
                     "base that is not a commit, --keep exists, no ds4ci source; nothing ran"),
                 (3, "no verdict: an event set no ds4ci/ status, an error or pending status, act did not finish, the "
                     "wheelhouse could not be built (with both events the most severe code wins: 3, 1, 0)")),
    "dispatch-check": ((0, "the plan is printed"), (2, "bad input or a moved head"), (3, "GitHub could not be asked")),
    "merge-check": ((0, "ready"), (1, "not ready: one line per unmet condition"), (2, "usage or configuration error"),
                    (3, "error: GitHub could not be asked")),
    "hash-cache add": ((0, "recorded"), (2, "a file or the cache cannot be read or written"),
                       (3, "a file changed while it was read")),
    "runner-key init": ((0, "written"), (2, "refused: the key file exists (never overwritten) or cannot be written")),
    "service install": ((0, "written (or, with --dry-run, printed)"),
                        (2, "refused: no --trusted-repo, not root without --root, a bad name, an install of ds4ci others "
                            "could change, a key where --key-from would put one (never overwritten)")),
    "service run": ((0, "stopped cleanly (SIGTERM)"),
                    (2, "usage: no --trusted-repo, a signing key others can read or not its own, a socket path "
                        "that is taken"),
                    (3, "cannot serve: the sandbox cannot run here")),
    "service request": ((0, "pass"), (1, "fail"),
                        (2, "usage, a request the service refused (bad SHA, unknown runner, a commit it cannot "
                            "fetch, a base off the trusted branch), an output that exists, or the gate's own 2"),
                        (3, "no verdict: busy (the runner's queue is full), the service unreachable, a broken "
                            "answer, or the gate's own 3")),
}
VERIFY_ORDER: Final = "With several bundles the most severe code wins, in the order 3, 5, 4, 1, 0."


SHARED_SHORT: Final = ("0 pass (yes); 1 fail (a verdict, and it is no); 2 usage or configuration error (nothing was run); "
                       "3 error, no verdict (not ready, a crash or hang, GitHub, evidence that does not verify); "
                       "`verify` alone adds 4 (intact, but no verdict) and 5 (an evidence schema it cannot read)")


def epilog() -> str:
    """What every command's --help ends with: the one meaning of each code, and where each command's are."""
    return f"Each command's exit codes: {DOC}. They mean the same for every command: {SHARED_SHORT}."


def shared_table() -> str:
    """The shared codes as the README shows them (a test keeps the README's copy equal to this)."""
    return "\n".join(["| code | meaning, for every command |", "| --- | --- |",
                      *(f"| {code} | {text} |" for code, text in SHARED)])


def codes(command: str) -> tuple[int, ...]:
    return tuple(code for code, _ in COMMANDS[command])


def render() -> str:
    out = [
        "# Exit codes",
        "",
        f"Generated from `ds4ci/commands/exitcodes.py` by `{REGENERATE}`: edit that file, not this one.",
        "Every command's `--help` states its codes and points here.",
        "",
        shared_table(),
        "",
        "Only 0 may ever turn a status green. `ds4ci verify` keeps 0, 1 and 2 and splits the rest, so a script "
        "can tell a bundle that was tampered with (3) from one that is intact but records no verdict (4) and from one "
        "sealed with an evidence schema this ds4ci cannot read (5; a bundle of an older schema it can read exits by "
        "its re-derived verdict, with a note; docs/results.md). " + VERIFY_ORDER,
        "",
        "| command | codes |",
        "| --- | --- |",
    ]
    for command, found in COMMANDS.items():
        out.append(f"| `ds4ci {command}` | " + "; ".join(f"{code} {text}" for code, text in found) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())

"""Which `[sandbox] enabled` / `require` settings a config may hold: one rule for every command that loads one."""

from __future__ import annotations

from ds4ci.errors import UsageError
from ds4ci.options.values import under_actions


def required(enabled: bool, require: bool | None) -> bool:
    """Whether the sandbox is required (``require`` unset: under GitHub Actions only); raises UsageError for a
    setting that turns it off under Actions or that contradicts itself."""
    if under_actions() and (require is False or enabled is False):
        said = " and ".join(f"{key} = false" for key, value in (("enabled", enabled), ("require", require))
                            if value is False)
        raise UsageError(f"[sandbox] {said}: refused under GitHub Actions (GITHUB_ACTIONS=true), where the gate, a "
                         "bisect and every later step run pull-request code only inside the sandbox; remove the "
                         "setting (a runner without bubblewrap then stops with exit 3 before any PR process starts)")
    found = under_actions() if require is None else require
    if found and not enabled:
        raise UsageError("sandbox.require = true and sandbox.enabled = false contradict each other; drop one")
    return found

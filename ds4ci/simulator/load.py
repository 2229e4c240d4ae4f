"""Loading the "model": hash the target and draft files, resolve the model card, log like the real server.

The real server refuses to start only when the target cannot be loaded. A draft that is not
named, cannot be read or does not load is reported on stderr and the server serves without
speculation: no banner, no summary, the trace says ``speculation=0``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from ds4ci.errors import Ds4ciError
from ds4ci.simulator.card import resolve_card
from ds4ci.simulator.faults import Arm
from ds4ci.simulator.logs import Log
from ds4ci.simulator.settings import Args, Knobs, Policy, SimSettings, read_policy

_HASH_BUFFER = 1 << 20


class SimStartupError(Ds4ciError):
    """The simulated server refuses to start, as the real one would (exit 1)."""

    exit_code = 1


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_BUFFER):
            digest.update(chunk)
    return digest.hexdigest()


def _load_draft(policy: Policy, draft_fails: bool, log: Log) -> str | None:
    """The draft's SHA-256 when it loaded, else None (the reason is logged)."""
    if not policy.spec:
        return None
    prefix = policy.prefixes[0]
    if policy.draft is None:
        log.line(f"[deepseek4] {prefix}SPEC set but {prefix}DRAFT gguf missing")
        return None
    try:
        sha = _sha256(Path(policy.draft))
    except OSError as exc:
        log.line(f"[deepseek4] DSpark drafter load FAILED: cannot open {policy.draft}: {exc.strerror or exc}")
        return None
    if draft_fails:
        log.line(
            f"[deepseek4] DSpark drafter load FAILED: {policy.draft}: tensor 'dspark.markov.weight' "
            "not found (fault draft-load-fails)"
        )
        return None
    log.line(f"[deepseek4] DSpark spec-decode ENABLED (drafter={policy.draft})")
    return sha


def load_settings(args: Args, environ: Mapping[str, str], knobs: Knobs, log: Log) -> SimSettings:
    policy = read_policy(environ, knobs.faults)
    log.line("[server] creating backend...")
    try:
        target_sha = _sha256(args.target)
    except OSError as exc:
        log.line(f"[deepseek4] failed to load model: {args.target}: {exc.strerror or exc}")
        log.line("[server] backend creation failed")
        raise SimStartupError(f"cannot read target model {str(args.target)!r}") from None
    log.line(
        f"[deepseek4] initialized: 43 layers, ctx={args.max_ctx}, 256 experts (6/6 routed), "
        f"fused_decode={'on' if args.fused_decode else 'off'}, prefill={args.prefill}"
    )
    # The arm (and so the fault scopes) is known from the policy alone.
    draft_fails = knobs.faults.active("draft-load-fails", _arm(policy))
    draft_sha = _load_draft(policy, draft_fails, log)
    return SimSettings(
        args=args,
        policy=policy,
        knobs=knobs,
        target_sha256=target_sha,
        draft_sha256=draft_sha,
        card=resolve_card(environ, log),
    )


def _arm(policy: Policy) -> Arm:
    return Arm(spec=policy.spec, q=policy.q)

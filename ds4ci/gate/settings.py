"""What one gate run records about its own settings: the sealed settings, the reproduce command, overrides.

``results.json`` carries ``settings`` (what ``verify`` re-judges against) and ``reproduce`` (a command
that re-runs this gate when pasted), both derived here from one ``GateConfig``.
"""

from __future__ import annotations

import shlex
from typing import cast

from ds4ci.errors import NoVerdictError
from ds4ci.judging import judge
from ds4ci.options.config import GateConfig
from ds4ci.records import EnvPrefix, RecordedSettings, Scope


def reproduce_command(cfg: GateConfig) -> str:
    """A command that re-runs this gate when pasted (absolute paths: it may be pasted anywhere)."""
    parts = ["ds4ci", "gate"]
    if cfg.config_file is not None:
        parts += ["--config", str(cfg.config_file.absolute())]
    if cfg.build is None:  # with [build], the config's build produces the binary
        parts += ["--server-bin", str(cfg.server_bin.path)]
    parts += [
        "--target", str(cfg.target.path.absolute()), "--target-sha256", cfg.target.sha256 or "",
        "--draft", str(cfg.draft.path.absolute()), "--draft-sha256", cfg.draft.sha256 or "",
    ]
    if cfg.server_bin.sha256:
        parts += ["--server-sha256", cfg.server_bin.sha256]
    for prompt in cfg.prompts:
        parts += ["--prompt-file", str(prompt.path.absolute()), "--prompt-sha256", prompt.sha256 or ""]
    parts += [
        "--runner", cfg.runner, "--widths", ",".join(str(q) for q in cfg.widths),
        "--max-tokens", str(cfg.max_tokens), "--seed", str(cfg.seed), "--repeats", str(cfg.repeats),
        "--target-device", cfg.target_device, "--max-ctx", str(cfg.max_ctx), "--chunk", str(cfg.chunk),
        "--mmvq-max-ncols", str(cfg.mmvq_max_ncols), "--evidence-dir", str(cfg.evidence_dir),
    ]
    for arg in cfg.server_args:
        parts.append(f"--server-arg={arg}")
    text = shlex.join(parts)
    return text if len(text) <= 4000 else text[:3996] + " ..."


def settings_json(cfg: GateConfig) -> RecordedSettings:
    return {
        "widths": list(cfg.widths),
        "max_tokens": cfg.max_tokens,
        "seed": cfg.seed,
        "repeats": cfg.repeats,
        "target_device": cfg.target_device,
        "max_ctx": cfg.max_ctx,
        "chunk": cfg.chunk,
        "mmvq_max_ncols": cfg.mmvq_max_ncols,
        "startup_timeout_s": cfg.startup_timeout_s,
        "request_timeout_s": cfg.request_timeout_s,
        "stop_timeout_s": cfg.stop_timeout_s,
        "server_args": list(cfg.server_args_all()),
        # options/config.py accepts only these values; Literal-typed GateConfig fields would make both casts go
        "env_prefixes": cast("list[EnvPrefix]", list(cfg.env_prefixes)),
        "log_cap_mib": cfg.log_cap_mib,
        "request_body": judge.request_body("<prompt>", cfg.seed, cfg.max_tokens),
        "configured_widths": list(cfg.configured_widths),
        "scope": cast(Scope, cfg.scope),
    }


def judge_settings(cfg: GateConfig, prompt_sha256s: list[str]) -> judge.Settings:
    return judge.Settings(cfg.widths, cfg.repeats, cfg.seed, cfg.max_tokens, tuple(prompt_sha256s))


def present_overrides(cfg: GateConfig) -> list[str]:
    return [str(p) for p in cfg.stale_override_files if p.exists() or p.is_symlink()]


def refuse_stale_overrides(cfg: GateConfig) -> None:
    present = present_overrides(cfg)
    if present:
        raise NoVerdictError(
            "stale override file(s) present that silently change server policy: "
            f"{', '.join(present)}; remove them (they are left over from manual runs) and run again"
        )

"""The run's first step, inside its attempt (so its evidence is kept whatever happens): every input file the
config pins is on this runner (``options.inputfiles``), then the sandbox is set up (``views.prepare``)."""

from __future__ import annotations

from collections.abc import Callable

from ds4ci.gate import views
from ds4ci.log import Logger
from ds4ci.options import inputfiles
from ds4ci.options.config import GateConfig


def prepare(cfg: GateConfig, progress: Logger | Callable[[str], None]) -> None:
    if cfg.role == "gate":
        server = cfg.server_bin if cfg.prebuilt_server_bin is not None else None
        inputfiles.require_present(cfg.prompts, (cfg.target, cfg.draft), server)
    views.prepare(cfg, progress)

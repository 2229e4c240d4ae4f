"""The gate's step that seals its runner's latest calibration (``gate.calibrations``) as ``citation.json``."""

from __future__ import annotations

from pathlib import Path

from ds4ci.errors import NoVerdictError
from ds4ci.evidence import store
from ds4ci.evidence.citation import CITATION, refused_line
from ds4ci.gate import views
from ds4ci.log import Logger
from ds4ci.options.config import GateConfig
from ds4ci.records import Results


def cite_calibration(cfg: GateConfig, doc: Results, attempt: Path, keys: tuple[str, ...], progress: Logger) -> None:
    """Find, verify and seal the citation (``ds4ci.calibrate.citing``), before any PR process runs; derive turns it
    into ``calibration``. Nothing without ``gate.calibrations``, nor on a runner that gates no models. A record that
    does not verify stops the run here, with derive's own words: an error, never a silent omission."""
    if cfg.calibrations is None or cfg.role != "gate":
        return
    from ds4ci.calibrate.citing import citation

    pinned = {"runner": doc["runner"], "settings": doc["settings"], "identities": {
        "target": {"sha256": cfg.target.sha256}, "draft": {"sha256": cfg.draft.sha256},
        "prompts": [{"sha256": p.sha256} for p in cfg.prompts]}}
    with progress.group("calibration"):
        found = citation(cfg.calibrations, pinned, keys, views.pr_trees(cfg))
        store.write_json(attempt / CITATION, found)
        progress(f"calibration: {found['record'] or 'no record of this runner in ' + str(cfg.calibrations)}"
                 + (f"; refused: {'; '.join(found['problems'])}" if found["problems"] else ""))
    if found["problems"]:
        raise NoVerdictError(refused_line(cfg.runner, found["record"] or str(cfg.calibrations), found["problems"]))

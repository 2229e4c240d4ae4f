"""The model card: sampler defaults for the request fields a client leaves out.

The real server resolves a JSON "sidecar" card for the loaded model at start-up and uses its
``sampling`` values for every request field that is omitted. The simulator does the same with
one card name, ``ds4ci-sim-toy.json``, looked up in ``DFLASH_MODEL_CARDS_DIR`` when that names
a directory, else in the card directory bundled with the simulator. The bundled card recommends
a presence and a repetition penalty (and a temperature), so a client that does not state every
sampler field loses speculation, exactly as it would on a real server with such a card.

Like the real server, a card that cannot be read or parsed is reported and ignored (the hard
fallback: greedy, no penalties); a value of the wrong type is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ds4ci.simulator.logs import Log

CARD_NAME = "ds4ci-sim toy"  # stands for the GGUF's general.name
CARD_FILE = "ds4ci-sim-toy.json"  # its normalized stem + .json
BUNDLED_DIR = Path(__file__).resolve().parent / "model_cards"
CARDS_DIR_VAR = "DFLASH_MODEL_CARDS_DIR"


@dataclass(frozen=True)
class ModelCard:
    """Sampler defaults; ``None`` means the card does not supply the field."""

    source: str  # the card file, or "hard-fallback"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None


def _number(sampling: Mapping[str, object], key: str) -> float | None:
    value = sampling.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _integer(sampling: Mapping[str, object], key: str) -> int | None:
    value = sampling.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _load(path: Path) -> ModelCard:
    data = json.loads(path.read_text(encoding="utf-8"))
    sampling = data.get("sampling") if isinstance(data, dict) else None
    if not isinstance(sampling, dict):
        return ModelCard(source=str(path))
    return ModelCard(
        source=str(path),
        temperature=_number(sampling, "temperature"),
        top_p=_number(sampling, "top_p"),
        top_k=_integer(sampling, "top_k"),
        presence_penalty=_number(sampling, "presence_penalty"),
        repetition_penalty=_number(sampling, "repetition_penalty"),
    )


def cards_dir(environ: Mapping[str, str]) -> Path | None:
    """The first card directory that exists: the variable's, then the bundled one."""
    candidates = [Path(environ[CARDS_DIR_VAR])] if environ.get(CARDS_DIR_VAR) else []
    candidates.append(BUNDLED_DIR)
    return next((c for c in candidates if c.is_dir()), None)


def resolve_card(environ: Mapping[str, str], log: Log) -> ModelCard:
    directory = cards_dir(environ)
    if directory is None:
        log.line("[model_card] no share/model_cards/ directory found; tried 2 candidate(s)")
    else:
        log.line(f"[model_card] using cards dir: {directory}")
        path = directory / CARD_FILE
        log.line(f"[model_card] probing sidecar: {path} (from general.name='{CARD_NAME}')")
        if path.is_file():
            try:
                return _load(path)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                log.line(f"[model_card] sidecar parse failed ({path}): {exc} — falling through")
        else:
            log.line(f"[model_card] sidecar not found at {path}")
    log.line("[model_card] using hard fallback (no sidecar, no family match for arch='deepseek4')")
    return ModelCard(source="hard-fallback")

"""Re-derive ``results.json`` inside sealed real-server bundles, leaving every other file byte for byte.

``results.json`` is a pure function of the sealed files (``ds4ci.evidence.derive``) and is not in
the manifest, so when ds4ci judges the same evidence differently (a new field, a new reason) our
captures are brought to today's judgement by deriving it again:

    .venv/bin/python tests/data/real-server/rejudge.py tests/data/real-server/*/*.tar.gz

Prints each bundle's new verdict. ``ds4ci verify`` of the rewritten bundle then reads it as intact.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

from ds4ci.evidence import bundle, results
from ds4ci.evidence.derive import derive
from ds4ci.evidence.store import RESULTS


def rejudge(archive: Path) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        (attempt,) = [p for p in Path(scratch).iterdir() if p.is_dir()]
        doc = derive(attempt)
        (attempt / RESULTS).write_text(results.dumps(doc), encoding="utf-8")
        files = sorted(str(p.relative_to(attempt)) for p in attempt.rglob("*") if p.is_file())
        bundle.write_archive(attempt, archive, files)
        return f"{archive}: {doc['verdict']} (exit {doc['exit_code']}): {'; '.join(doc['reasons'])[:300]}"


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(rejudge(Path(name)))

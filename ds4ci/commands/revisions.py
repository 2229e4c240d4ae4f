"""``ds4ci revisions``: print the revisions record (the results.json "revisions" object) as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from ds4ci.errors import EXIT_PASS
from ds4ci.runner.revisions import collect
from ds4ci.textsafe import json_text


def run_revisions(repo_dir: Path, head_ref: str, base_ref: str | None, upstream_ref: str | None) -> int:
    record = collect(repo_dir, head_ref=head_ref, base_ref=base_ref, upstream_ref=upstream_ref)
    print(json_text(json.dumps(record, indent=2, sort_keys=True)))
    return EXIT_PASS

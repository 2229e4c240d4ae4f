"""``ds4ci hash-cache add FILE...``: fill a hash cache on purpose, outside any pull request's run.

On a runner that runs untrusted pull requests, the only cache worth trusting is one that PR code
cannot write: an administrator fills it (as another user, e.g. root) and the gate reads it through
``hash_cache_path``. Entries carry the file's full stat key, so a file changed since is re-read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ds4ci.options.config import PinnedFile
from ds4ci.runner.hashcache import default_cache_path
from ds4ci.runner.identity import identify


def run_hash_cache_add(files: Sequence[Path], cache: Path | None) -> int:
    target = cache or default_cache_path()
    pinned = [PinnedFile(f"file{i}", path, None) for i, path in enumerate(files)]
    found = identify(pinned, cache_path=target, use_cache=False, progress=print)
    for item in found:
        print(f"{item.sha256}  {item.path}")
    print(f"hash cache: {target} ({len(found)} file(s) recorded; a file modified moments ago is not cached)")
    return 0

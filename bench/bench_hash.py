"""SHA-256 of big files: ds4ci.runner.identity vs sha256sum, parallel vs one after another, cache re-verify.

Files are made in a temporary directory (default: $TMPDIR) and deleted at the end, even on error.
Everything is measured with the files in the page cache (each is read once first), so the
figures compare hashing, not the disk; the order of the two tools alternates every round.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, median, parser, say, verdict

from ds4ci.options.config import PinnedFile
from ds4ci.runner.identity import RACY_WINDOW_NS, identify

NAME = "hash"
MiB = 1024 * 1024


def make_file(path: Path, size: int, seed: int) -> None:
    block = bytearray(os.urandom(64 * MiB))
    block[:8] = seed.to_bytes(8, "little")  # distinct contents per file
    with path.open("wb") as fh:
        left = size
        while left > 0:
            n = min(left, len(block))
            fh.write(block[:n])
            left -= n


def warm(paths: list[Path]) -> None:
    for p in paths:
        with p.open("rb", buffering=0) as fh:
            while fh.read(16 * MiB):
                pass


def time_ds4ci(paths: list[Path], cache: Path, use_cache: bool, workers: int | None = None) -> tuple[float, list[str]]:
    files = [PinnedFile(f"f{i}", p, None) for i, p in enumerate(paths)]
    t0 = time.perf_counter()
    ids = identify(files, cache_path=cache, use_cache=use_cache, workers=workers)
    return time.perf_counter() - t0, [i.sha256 for i in ids]


def time_sha256sum(paths: list[Path]) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    out = subprocess.run(["sha256sum", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, [line.split()[0] for line in out.splitlines()]


def time_openssl(paths: list[Path]) -> tuple[float, list[str]]:
    """A second reference: the OpenSSL CLI, i.e. the same SHA-256 code hashlib calls, in C."""
    t0 = time.perf_counter()
    out = subprocess.run(["openssl", "dgst", "-sha256", "-r", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return time.perf_counter() - t0, [line.split()[0] for line in out.splitlines()]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--single-gib", type=float, help="size of the single file; default 1, full 3")
    p.add_argument("--parallel-gib", type=float, help="size of each of the 4 parallel files; default 0.5, full 1")
    p.add_argument("--rounds", type=int, help="default 3, full 5")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = p.parse_args()
    single = int((args.single_gib or (3 if args.full else 1)) * 1024 * MiB)
    each = int((args.parallel_gib or (1 if args.full else 0.5)) * 1024 * MiB)
    rounds = args.rounds or (5 if args.full else 3)
    need = single + 4 * each
    free = shutil.disk_usage(args.dir).free
    if free < need * 2:
        raise SystemExit(f"need {2 * need / 1e9:.1f} GB free in {args.dir} (twice the files), found {free / 1e9:.1f} GB")
    say(NAME, f"free disk in {args.dir}: {free / 1e9:.1f} GB; writing {need / 1e9:.2f} GB of test files")

    root = Path(tempfile.mkdtemp(prefix="ds4ci-bench-hash-", dir=args.dir))
    try:
        big = root / "single.bin"
        make_file(big, single, 0)
        parts = [root / f"part{i}.bin" for i in range(4)]
        for i, part in enumerate(parts):
            make_file(part, each, i + 1)
        cache = root / "hash-cache.json"
        warm([big, *parts])

        # 1. one big file, same run, alternating order
        times: dict[str, list[float]] = {"ds4ci": [], "sha256sum": [], "openssl": []}
        for r in range(rounds):
            steps = [("ds4ci", lambda: time_ds4ci([big], cache, use_cache=False)), ("sha256sum", lambda: time_sha256sum([big])),
                     ("openssl", lambda: time_openssl([big]))]
            steps = steps[r % 3:] + steps[: r % 3]
            digests = {}
            for name, fn in steps:
                seconds, digests[name] = fn()
                times[name].append(seconds)
            if len({tuple(d) for d in digests.values()}) != 1:
                raise SystemExit(f"digests differ: {digests}")
        ours, theirs, ossl = times["ds4ci"], times["sha256sum"], times["openssl"]
        single_ratio = [t / o for o, t in zip(ours, theirs, strict=True)]  # ours' throughput / theirs
        ossl_ratio = [t / o for o, t in zip(ours, ossl, strict=True)]
        say(NAME, f"single {single / MiB / 1024:.1f} GiB file: ds4ci median {single / median(ours) / 1e6:.0f} MB/s, "
                  f"sha256sum {single / median(theirs) / 1e6:.0f} MB/s; throughput ratio median {median(single_ratio):.3f} "
                  f"(per round {', '.join(f'{x:.3f}' for x in single_ratio)}); goal >= 0.95: "
                  f"{verdict(median(single_ratio) >= 0.95)}")
        say(NAME, f"  reference: openssl dgst {single / median(ossl) / 1e6:.0f} MB/s; ds4ci / openssl throughput "
                  f"median {median(ossl_ratio):.3f}")

        # 2. four files: ds4ci's thread pool vs sha256sum one after another
        ptimes: dict[str, list[float]] = {"ds4ci": [], "sha256sum": [], "ds4ci-1-thread": []}
        for r in range(rounds):
            steps = [("ds4ci", lambda: time_ds4ci(parts, cache, use_cache=False)), ("sha256sum", lambda: time_sha256sum(parts)),
                     ("ds4ci-1-thread", lambda: time_ds4ci(parts, cache, use_cache=False, workers=1))]
            steps = steps[r % 3:] + steps[: r % 3]
            digests = {}
            for name, fn in steps:
                seconds, digests[name] = fn()
                ptimes[name].append(seconds)
            if len({tuple(d) for d in digests.values()}) != 1:
                raise SystemExit(f"digests differ: {digests}")
        par, seq, one_thread = ptimes["ds4ci"], ptimes["sha256sum"], ptimes["ds4ci-1-thread"]
        par_ratio = [a / b for a, b in zip(par, seq, strict=True)]
        self_ratio = [a / b for a, b in zip(par, one_thread, strict=True)]
        workers = min(4, os.cpu_count() or 1)
        say(NAME, f"4 x {each / MiB / 1024:.2f} GiB: ds4ci ({workers} threads) / sha256sum one after another: "
                  f"median {median(par_ratio):.3f} (per round {', '.join(f'{x:.3f}' for x in par_ratio)}; "
                  f"ideal {1 / workers:.2f}); goal clearly below 1.0: {verdict(median(par_ratio) <= 0.8)}")
        say(NAME, f"  same work, ds4ci {workers} threads / ds4ci 1 thread: median {median(self_ratio):.3f} "
                  f"(per round {', '.join(f'{x:.3f}' for x in self_ratio)}); this isolates the parallelism from "
                  "the faster SHA-256 code")

        # 3. re-verify unchanged files through the cache. The files must be older than the racy
        # window or identify (correctly) refuses to cache them.
        age = (time.time_ns() - max(p.stat().st_mtime_ns for p in [big, *parts])) / 1e9
        if age * 1e9 < RACY_WINDOW_NS:
            time.sleep(RACY_WINDOW_NS / 1e9 - age + 0.1)
        cache.unlink(missing_ok=True)
        fill, _ = time_ds4ci([big, *parts], cache, use_cache=True)
        hits = [time_ds4ci([big, *parts], cache, use_cache=True)[0] for _ in range(20)]
        say(NAME, f"re-verify {single + 4 * each:,} bytes in 5 unchanged files via the cache: median "
                  f"{median(hits) * 1e3:.2f} ms of 20 (first, filling read: {fill:.2f} s); goal: milliseconds: "
                  f"{verdict(median(hits) < 0.1)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        say(NAME, f"removed {root}")

    figures: dict[str, Any] = {
        "single_file_bytes": single, "parallel_file_bytes_each": each, "rounds": rounds,
        "single_ds4ci_s": ours, "single_sha256sum_s": theirs,
        "single_throughput_ratio_median": median(single_ratio),
        "single_openssl_s": ossl, "single_ds4ci_over_openssl_throughput_median": median(ossl_ratio),
        "parallel_ds4ci_1_thread_s": one_thread, "parallel_over_1_thread_median": median(self_ratio),
        "single_ds4ci_MBps_median": single / median(ours) / 1e6,
        "single_sha256sum_MBps_median": single / median(theirs) / 1e6,
        "parallel_ds4ci_s": par, "sequential_sha256sum_s": seq,
        "parallel_over_sequential_median": median(par_ratio), "parallel_workers": workers,
        "cache_fill_s": fill, "cache_reverify_s": hits, "cache_reverify_median_ms": median(hits) * 1e3,
        "goal_single_met": median(single_ratio) >= 0.95,
        "goal_parallel_met": median(par_ratio) <= 0.8,
        "goal_cache_met": median(hits) < 0.1,
    }
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()

"""Import every module the gate uses after PR code has run, before the first PR process starts.

Defence in depth: even a PR process that could write ds4ci's installed files (the sandbox makes
them read-only or invisible) would find nothing left for ds4ci to import afterwards. The cost is
measured by ``bench/bench_sandbox.py`` (docs/benchmarks.md).
"""

from __future__ import annotations


def preload() -> None:
    import ds4ci.evidence.bundle
    import ds4ci.evidence.results
    import ds4ci.gate.build
    import ds4ci.gate.checks
    import ds4ci.gate.privatebin
    import ds4ci.gate.server
    import ds4ci.runner.fingerprint
    import ds4ci.runner.identity
    import ds4ci.runner.revisions

    ds4ci.evidence.results.preload()

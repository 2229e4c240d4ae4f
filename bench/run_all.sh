#!/bin/sh
# Run every benchmark; figures are printed and written as JSON to ${TMPDIR:-/tmp}/ds4ci-bench (or $1).
# Usage: bench/run_all.sh [--full] [OUT_DIR]
#   default: modest sizes, about 6-7 minutes on a 2-core machine
#   --full:  the sizes of docs/benchmarks.md (3 GiB + 4 x 1 GiB hashing, 1 GB logs parsed whole too,
#            5 gate and overhead rounds); about 18 minutes, needs ~16 GB free in $TMPDIR and ~3 GB of RAM
set -eu
cd "$(dirname "$0")/.."
FULL=""
if [ "${1:-}" = "--full" ]; then FULL="--full"; shift; fi
OUT="${1:-${TMPDIR:-/tmp}/ds4ci-bench}"
mkdir -p "$OUT"
PY=".venv/bin/python"
[ -x "$PY" ] || PY="python3"
$PY bench/bench_cli.py $FULL --json-out "$OUT/cli.json"
$PY bench/bench_publish.py $FULL --json-out "$OUT/publish.json"
$PY bench/bench_hash.py $FULL --json-out "$OUT/hash.json"
$PY bench/bench_logparse.py $FULL --json-out "$OUT/logparse.json"
$PY bench/bench_gate.py $FULL --json-out "$OUT/gate.json"
$PY bench/bench_overhead.py $FULL --json-out "$OUT/overhead.json"
echo "all figures in $OUT"

#!/bin/sh
# SIGKILL a real `ds4ci gate` (simulator, sandboxed) at random points; print what each kill left (JSON).
# Usage: bench/kill9_rounds.sh [ROUNDS] [SEED]   (default 100 rounds, seed 26; about 6-10 minutes on 2 cores)
# The same harness runs in CI with 10 rounds: tests/e2e/test_kill9_rounds.py (DS4CI_KILL9_ROUNDS).
set -eu
cd "$(dirname "$0")/.."
PY="$PWD/.venv/bin/python"
[ -x "$PY" ] || PY="python3"
ROOT="$(mktemp -d "${TMPDIR:-/tmp}/ds4ci-kill9-XXXXXX")"
cd "$ROOT"  # not inside a git checkout: the gate then records no revisions
PYTHONPATH="$OLDPWD" "$PY" "$OLDPWD/tests/kill9_rounds.py" "$ROOT/ws" "${1:-100}" "${2:-26}"
rm -rf "$ROOT"

#!/usr/bin/env bash
# Runner-side smoke test on a real GPU host: preflight, the demo, and a CUDA-device gate run
# against the bundled simulator (no dflash_server needed). Writes everything under OUT.
#   OUT=/tmp/smoke bash bench/gpu_host_smoke.sh
# Needs ds4ci importable (pip install ., or PYTHONPATH=<repo>) and python3.
set -uo pipefail
OUT="${OUT:?set OUT to a directory for the outputs}"
mkdir -p "$OUT"
ds4ci() { python3 -c 'import sys; from ds4ci.cli import main; sys.argv[0] = "ds4ci"; main()' "$@"; }

{ nvidia-smi -L; nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv; } > "$OUT/gpu.txt" 2>&1
/usr/bin/time -v python3 -c 'import sys; from ds4ci.cli import main; sys.argv = ["ds4ci", "preflight", "--json", "--runner", "h200"]; main()' \
  > "$OUT/preflight.json" 2> "$OUT/preflight.stderr"; echo "preflight exit $?" >> "$OUT/summary.txt"

work=$(mktemp -d)
ds4ci demo --keep "$work/demo" > "$OUT/demo.txt" 2> "$OUT/demo.stderr"; echo "demo exit $?" >> "$OUT/summary.txt"

ev="$work/demo/evidence"
ds4ci gate --server-bin "$work/demo/ds4ci-sim-server" \
  --target "$work/demo/models/target.gguf" --target-sha256 "$(sha256sum "$work/demo/models/target.gguf" | cut -d' ' -f1)" \
  --draft "$work/demo/models/draft.gguf" --draft-sha256 "$(sha256sum "$work/demo/models/draft.gguf" | cut -d' ' -f1)" \
  --prompt-file "$work/demo/models/prompt.txt" --prompt-sha256 "$(sha256sum "$work/demo/models/prompt.txt" | cut -d' ' -f1)" \
  --target-device cuda:0 --runner h200 --evidence-dir "$ev" --results-out "$OUT/h200.results.json" \
  > "$OUT/gate.txt" 2> "$OUT/gate.stderr"; echo "gate exit $?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"

# A plan for ../shared/gpu/driver.sh (copy it over the payload's plan.sh): how fast a calibration runs on one GPU,
# and with which lever gates side by side stop slowing each other down (docs/benchmarks.md, "Gates side by side").
# Sourced by driver.sh on the GPU host in the project's root, after its setup stage built the engine ($W/build)
# and wrote the tiny models ($W/models). `stage NAME COMMAND...` runs once (markers in /tmp/w); every command is
# bounded by `timeout`; each stage's wall time goes to $W/timings.txt (name, seconds, exit status).
RUNNER=${RUNNER:-h100}
SBS=no-rollback,accept-off-by-one,stale-snapshot  # three mutants caught at every width: binaries for the stages

timed() {  # timed NAME SECONDS COMMAND...: COMMAND under `timeout SECONDS`, its wall time appended to timings.txt
  local name=$1 limit=$2; shift 2
  local t0 rc; t0=$(date +%s.%N)
  timeout --kill-after=30 "$limit" "$@"; rc=$?
  echo "$name $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }') exit=$rc" >> $W/timings.txt
  return $rc
}
bench() {  # bench NAME SECONDS ARGS...: bench/real_mutants.py on the binaries built by sbs-build
  local name=$1 limit=$2; shift 2
  timed "$name" "$limit" python3 bench/real_mutants.py --binaries $W/sbs/bin --models $W/models --runner $RUNNER \
    --out $W/out-$name --json-out $W/out-$name.json "$@"
}
git_source() {  # calibrate and the bench refuse a source that is not an unmodified git checkout
  [ -d $W/src/.git ] && return 0
  git -C $W/src init -q && git -C $W/src add -A && git -C $W/src -c user.email=ci@example.invalid -c user.name=ci \
    commit -qm "engine source as archived"
}
best_lever() {  # the lever whose two gates side by side ended soonest (the larger of the two gates' wall times)
  python3 - "$W" <<'EOF'
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
found = {}
for lever, name in (("none", "sbs2-none"), ("affinity", "sbs2-affinity"), ("affinity+online", "sbs2-online")):
    try:
        rows = json.loads((w / f"out-{name}.json").read_text())["rows"]
        found[lever] = max(r["wall_s"] for r in rows.values())
    except (OSError, ValueError, KeyError):
        pass
print(min(found, key=found.get) if found else "affinity+online")
EOF
}

stage git-source git_source
# The control and three mutants, built once (incremental from the built tree; the build folder is left as the
# unchanged source builds it).
stage sbs-build timed sbs-build 600 python3 bench/real_mutants.py --build $W/build --only $SBS --build-only --out $W/sbs
# One at a time: the baseline on this card (the control, then one mutant).
stage alone bench alone 300 --only no-rollback --jobs 1
# What one repeat instead of the config's two saves per gate (calibrate --mutant-repeats 1 gates mutants so).
stage alone-r1 bench alone-r1 300 --only no-rollback --jobs 1 --gate-arg=--repeats --gate-arg=1
# Two gates side by side (the control and one mutant), with each lever.
stage sbs2-none bench sbs2-none 600 --only no-rollback --jobs 2 --cpu-sets none
stage sbs2-affinity bench sbs2-affinity 600 --only no-rollback --jobs 2 --cpu-sets affinity
stage sbs2-online bench sbs2-online 600 --only no-rollback --jobs 2 --cpu-sets affinity+online
BEST=$(best_lever); echo "=== best lever for two side by side: $BEST"; echo "best $BEST" >> $W/timings.txt
# Four side by side with the best lever (the control and the three mutants).
stage sbs4-best bench sbs4-best 600 --only $SBS --jobs 4 --cpu-sets "$BEST"
# The full calibration over the catalogue with the levers, from the built tree; its record signed and verified.
stage runner-key timed runner-key 60 python3 -m ds4ci runner-key init  # the key the record is signed with
stage calibrate timed calibrate 1500 python3 -m ds4ci calibrate --build $W/build --models $W/models --runner $RUNNER \
  --out $W/cal --jobs 4 --cpu-sets "$BEST"
stage verify timed verify 300 python3 -m ds4ci verify $W/cal/record
# Side work last: one gate's four arms side by side (target-only and q=2,3,4 on the one GPU: [gate] parallel).
stage arms-parallel bench arms-parallel 300 --only no-rollback --jobs 1 --gate-arg=--parallel --gate-arg=4
# With one repeat for the mutants (a lower bound the record says), if the lease has time left (uncomment):
# stage calibrate-r1 timed calibrate-r1 1500 python3 -m ds4ci calibrate --build $W/build --models $W/models \
#   --runner $RUNNER --out $W/cal-r1 --jobs 4 --cpu-sets "$BEST" --mutant-repeats 1
# With jobs 2 instead of 4, if the lease has time left (uncomment):
# stage calibrate-2 timed calibrate-2 1500 python3 -m ds4ci calibrate --build $W/build --models $W/models \
#   --runner $RUNNER --out $W/cal-2 --jobs 2 --cpu-sets "$BEST"
cat $W/timings.txt

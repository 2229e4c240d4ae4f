"""CLI start-up: ``ds4ci --help`` wall time, the heaviest imports on the way, and which heavy modules it loads.

The console script is run as a subprocess (what a user or a workflow step pays). Imports come
from ``python -X importtime``; the heavy-module check inspects ``sys.modules`` after ``--help``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, emit, median, parser, say, timed, verdict

NAME = "cli"
HEAVY = ("github", "jinja2", "requests", "jsonschema", "urllib3", "rich")
HELP = "import sys; sys.argv = ['ds4ci', '--help']\nfrom ds4ci.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
PROBE = HELP + "import json; print('MODULES=' + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))\n"


def importtime() -> list[dict[str, Any]]:
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", HELP], capture_output=True, text=True, check=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line[len("import time:"):].split("|")
        # The name column is one space, then two more per nesting level: 0 = imported by the script.
        rows.append({"module": name.strip(), "depth": (len(name) - len(name.lstrip()) - 1) // 2,
                     "self_us": int(own), "cumulative_us": int(cumulative)})
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    cmd = [str(BIN / "ds4ci"), "--help"]
    for _ in range(2):  # warm the page cache and .pyc files
        timed(cmd)
    walls = []
    for _ in range(args.runs):
        seconds, proc = timed(cmd)
        if proc.returncode != 0:
            raise SystemExit(f"ds4ci --help exited {proc.returncode}: {proc.stderr}")
        walls.append(seconds)
    bare = median([timed([sys.executable, "-c", "pass"])[0] for _ in range(args.runs)])
    goal = median(walls) < 0.35
    say(NAME, f"ds4ci --help: median {median(walls) * 1e3:.0f} ms of {args.runs} (min {min(walls) * 1e3:.0f}, "
              f"max {max(walls) * 1e3:.0f}); bare interpreter start {bare * 1e3:.0f} ms; goal < 350 ms: {verdict(goal)}")

    rows = importtime()
    top_level = sorted((r for r in rows if r["depth"] <= 1), key=lambda r: -r["cumulative_us"])[:10]
    top_self = sorted(rows, key=lambda r: -r["self_us"])[:10]
    say(NAME, "top imports by cumulative time (depth <= 1, one -X importtime run):")
    for r in top_level:
        say(NAME, f"  {r['cumulative_us'] / 1e3:7.1f} ms  {r['module']}")
    say(NAME, "top imports by self time:")
    for r in top_self:
        say(NAME, f"  {r['self_us'] / 1e3:7.1f} ms  {r['module']}")

    out = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,)], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(next(line for line in out.splitlines() if line.startswith("MODULES="))[len("MODULES="):])
    loaded_roots = sorted({m.split(".")[0] for m in loaded})
    for name in HEAVY:
        state = "LOADED (unwanted)" if name in loaded_roots else "not imported: OK"
        say(NAME, f"heavy module {name:10} {state}")
    must_not = ("github", "jinja2", "requests", "jsonschema")
    clean = not any(n in loaded_roots for n in must_not)
    say(NAME, f"assert: none of {', '.join(must_not)} imported by ds4ci --help: {'PASS' if clean else 'FAIL'}")
    emit(NAME, args, {
        "help_wall_s": walls, "help_median_ms": median(walls) * 1e3, "bare_python_median_ms": bare * 1e3,
        "goal_met": goal, "top_cumulative": top_level, "top_self": top_self,
        "heavy_loaded": loaded_roots, "heavy_check_pass": clean,
    })
    if not clean:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

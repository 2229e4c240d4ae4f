"""One width per run, two servers per width, /health polled once a second: the upstream gate's shape.

The shape was read in the upstream DS4 gate, Luce-Org/lucebox ``server/scripts/test_ds4_exact_verify_parity.py``
at 549d21e (not on the local mirror's HEAD 62880e2, which has only the older
``server/scripts/test_ds4_fused_verify_parity.py`` of the same pattern; its unit tests are
``server/tests/test_ds4_exact_verify_parity.py``). Facts of that script this one keeps:

- one speculation width per run (``--spec-q``, default 4); three widths are three runs;
- per run, it hashes the four inputs (server, target, draft, prompt; 1 MiB reads) before any
  server starts, then starts two servers one after the other: greedy AR (target-only) first,
  then reference-exact; each gets the same server argv as ds4ci's
  (``--max-ctx 4096 --chunk 512 --target-device hip:0 --ds4-fused-decode --ds4-prefill exact``);
- readiness: ``GET /health`` with urllib; on a refused connection (or any ``OSError``) it sleeps
  1 s and tries again, so readiness is seen up to a second late;
- requests through ``urllib.request`` (a new connection each), then SIGTERM and ``wait``.

Where this script differs on purpose, so that the servers do exactly the work ds4ci's do: it sends
ds4ci's requests (every prompt ``--repeats`` times, the gate's full greedy body; the upstream
script sends one prompt once, with ``"model": "dflash"`` and fewer sampler fields), it gives the
servers ds4ci's environment (bench/ideal_loop.py ``env_for``; upstream sets only ``DFLASH_*`` and
``DFLASH_DS4_SPEC_Q`` in both arms), and it picks a free port (upstream: 18084). It parses no trace,
compares no tokens and writes no manifest (upstream does, all of it in well under a millisecond
for these log sizes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ideal_loop import SAMPLER, env_for, free_port, loop_parser, server_argv


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited before readiness: {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"server did not become ready within {timeout:.0f} s")


def run_case(args: argparse.Namespace, q: int | None, prompts: list[str]) -> dict[str, float | int | None]:
    port = free_port()
    cmd = server_argv(args, port)
    logs = args.log_dir / ("target-only" if q is None else f"q{q}")
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "stdout.log").open("wb") as out, (logs / "stderr.log").open("wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env_for(q, args.draft), stdout=out, stderr=err)
        try:
            wait_ready(port, proc, 180)
            ready = time.perf_counter() - t0
            for _ in range(args.repeats):
                for prompt in prompts:
                    body = {"messages": [{"role": "user", "content": prompt}], **SAMPLER, "seed": args.seed,
                            "max_tokens": args.max_tokens}
                    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                                     data=json.dumps(body).encode(),
                                                     headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(request, timeout=600) as answer:
                        if answer.status != 200:
                            raise SystemExit(f"generation returned HTTP {answer.status}")
                        json.load(answer)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
    return {"q": q, "ready_s": round(ready, 4), "run_s": round(time.perf_counter() - t0, 4)}


def main() -> None:
    p = loop_parser(__doc__.splitlines()[0])
    p.add_argument("--spec-q", type=int, default=4, help="the one width of this run")
    args = p.parse_args()
    t0 = time.perf_counter()
    for path in (args.server_bin, args.target, args.draft, *args.prompt_file):
        sha256_file(path)
    prompts = [path.read_text(encoding="utf-8") for path in args.prompt_file]
    servers = [run_case(args, None, prompts), run_case(args, args.spec_q, prompts)]
    if args.json_out is not None:
        doc = {"servers": servers, "total_s": round(time.perf_counter() - t0, 4)}
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""An ideal orchestrator: the servers ds4ci's gate starts, the requests it sends, and nothing else.

The yardstick for ds4ci's own overhead (bench/bench_overhead.py). Serially, one target-only server
and then one reference-exact server per width; each is polled on ``/health`` every 10 ms, gets
every prompt ``--repeats`` times (interleaved, as the gate sends them), and is stopped with
SIGTERM and waited for. No checks, no hashing, no evidence, no supervisor, standard library only.

What it reproduces of ``ds4ci gate`` (read in ds4ci/server.py ``server_command``, ds4ci/policy.py,
ds4ci/judge.py ``request_body``, and checked against a simulator run's evidence:
``servers/<key>/command.json``, ``requests/*/*.request.json``, results.json ``settings``):

- argv: ``BIN TARGET --host 127.0.0.1 --port P --max-ctx 4096 --chunk 512 --target-device hip:0``
  then the device defaults ``--ds4-fused-decode --ds4-prefill exact`` (the gate's defaults);
- env: the inherited environment without ``DFLASH_*``/``LUCE_*`` (the gate strips every policy
  variable; the bench environment has no others), plus the common policy of both arms
  (``LUCE_MMVQ_MAX_NCOLS=4``, ``{DFLASH_,LUCE_}DS4_EXACT_VERIFY_TRACE=1``, ``..._ADAPTIVE_WIDTH=0``)
  and, for width q, the activation ``{DFLASH_,LUCE_}DS4_SPEC=1``, ``..._DS4_DRAFT=DRAFT``,
  ``..._DS4_SPEC_Q=q``, ``..._DS4_SPEC_REFERENCE_EXACT=1``;
- body: ``POST /v1/chat/completions`` with the gate's greedy body (every sampler field, seed 1234);
- stdout and stderr of each server go to a file each, as the gate's do.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import time
from pathlib import Path

SAMPLER = {"temperature": 0, "top_k": 0, "top_p": 1, "repetition_penalty": 1, "presence_penalty": 0,
           "frequency_penalty": 0, "stream": False}
PREFIXES = ("DFLASH_", "LUCE_")


def env_for(q: int | None, draft: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    env["LUCE_MMVQ_MAX_NCOLS"] = "4"
    for p in PREFIXES:
        env.update({f"{p}DS4_EXACT_VERIFY_TRACE": "1", f"{p}DS4_ADAPTIVE_WIDTH": "0"})
        if q is not None:
            env.update({f"{p}DS4_SPEC": "1", f"{p}DS4_DRAFT": str(draft), f"{p}DS4_SPEC_Q": str(q),
                        f"{p}DS4_SPEC_REFERENCE_EXACT": "1"})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def server_argv(args: argparse.Namespace, port: int) -> list[str]:
    """The command line ds4ci's gate gives the server (HIP device defaults, as ds4ci.toml sets none)."""
    return [str(args.server_bin), str(args.target), "--host", "127.0.0.1", "--port", str(port), "--max-ctx", "4096",
            "--chunk", "512", "--target-device", "hip:0", "--ds4-fused-decode", "--ds4-prefill", "exact"]


def run(args: argparse.Namespace) -> list[dict[str, float | int | None]]:
    servers: list[dict[str, float | int | None]] = []
    prompts = [p.read_text(encoding="utf-8") for p in args.prompt_file]
    for q in [None, *(int(w) for w in args.widths.split(","))]:
        port = free_port()
        cmd = server_argv(args, port)
        logs = args.log_dir / ("target-only" if q is None else f"q{q}")
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "stdout.log").open("wb") as out, (logs / "stderr.log").open("wb") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, env=env_for(q, args.draft), stdout=out, stderr=err)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            while True:  # readiness: the first 200 on /health, polled every 10 ms
                try:
                    conn.request("GET", "/health")
                    answer = conn.getresponse()
                    answer.read()
                    if answer.status == 200:
                        break
                except OSError:
                    conn.close()
                    if proc.poll() is not None:
                        raise SystemExit(f"server exited with {proc.returncode} before it was ready") from None
                time.sleep(0.01)
            ready = time.perf_counter() - t0
            for _ in range(args.repeats):
                for prompt in prompts:
                    body = {"messages": [{"role": "user", "content": prompt}], **SAMPLER, "seed": args.seed,
                            "max_tokens": args.max_tokens}
                    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
                    answer = conn.getresponse()
                    answer.read()
                    if answer.status != 200:
                        raise SystemExit(f"completion answered HTTP {answer.status}")
            conn.close()
            proc.terminate()
            proc.wait()
            servers.append({"q": q, "ready_s": round(ready, 4), "run_s": round(time.perf_counter() - t0, 4)})
    return servers


def loop_parser(description: str) -> argparse.ArgumentParser:
    """The flags both server loops take (the workload ds4ci's gate would run)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--server-bin", type=Path, required=True)
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--draft", type=Path, required=True)
    p.add_argument("--prompt-file", type=Path, action="append", required=True)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-dir", type=Path, required=True)
    p.add_argument("--json-out", type=Path, help="write each server's ready and run times here as JSON")
    p.add_argument("--full", action="store_true", help="no effect (the sizes are the flags above; bench_overhead.py sets them)")
    return p


def main() -> None:
    p = loop_parser(__doc__.splitlines()[0])
    p.add_argument("--widths", default="2,3,4")
    args = p.parse_args()
    t0 = time.perf_counter()
    servers = run(args)
    if args.json_out is not None:
        doc = {"servers": servers, "total_s": round(time.perf_counter() - t0, 4)}
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

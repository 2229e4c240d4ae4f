#!/usr/bin/env python3
"""A server that is not ds4ci's: an independent, minimal speaker of the DS4 server protocol.

Written separately from ds4ci-sim so the gate is proven against a program we did not design
together with it. Stdlib only. It speaks the real server's format: the trace (only with the
trace variable set), the reference-exact banner and the summary with decimal mean_accept and
gen = n - 1; it accepts the sampler fields (a penalty or a temperature means no speculation),
closes every connection, refuses --ds4-fused-decode off HIP (exit 2), and on SIGTERM answers
what is in flight before it exits 0.

FOREIGN_BEHAVIOUR:
  good                   the format above
  mismatch               spec arm: token 5 differs
  crash-on-request       exits 9 on the first completion
  crash-on-spec-request  speculative arm only: exits 9 on the first completion without printing a line
  crash-on-props         exits 9 on GET /props, after printing an assertion line to stderr
  upstream-lines         prints exactly the upstream gate's example lines, whatever is asked
  trace-stdout           the trace goes to stdout
  luce-only              reads LUCE_DS4_* only (DFLASH_DS4_* are ignored)
  summary-after-response trace, banner and summary are written after the response is sent
  no-counters            summary without matched=/offered=
  failure-line           spec arm: also prints FOREIGN_FAILURE_LINE (default "[ds4-spec] verify failed")
  slow-teardown          after SIGTERM and the last answer, waits FOREIGN_TEARDOWN_S (default 120) s
  no-draft               spec arm: the draft "does not load"; serves without speculation
  nan-props              GET /props answers a JSON text with NaN in it (Python's json writes it)
  deep-props             GET /props answers an array nested 30000 levels deep
  nan-answer             every completion answer holds NaN and Infinity
  deep-answer            every completion answer is an array nested 30000 levels deep
  drip-answer            every completion answer is sent one byte every FOREIGN_DRIP_S (default 0.5) s
  endless-props          GET /props answers chunked with a chunk size of -1, then bytes without end
  silent                 answers the HTTP API as "good" does, but prints no DS4 line at all (an engine that does not
                         speak the protocol: its own log lines only)
  fill-tmp               before it serves, writes files of 1 MiB into /tmp until a write fails or 168 MiB are written
"""

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

UPSTREAM_TRACE_SPEC = "[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=3 ids=[8 13 21]"
UPSTREAM_TRACE_TARGET = "[ds4-exact-verify-trace] reference_exact=0 speculation=0 n=3 ids=[8 13 21]"
UPSTREAM_BANNER = "[ds4-spec] reference-exact verifier: sequential target replay with full rollback snapshots"
UPSTREAM_SUMMARY = "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3.00 q_cap=4 full_snap=1"
FUSED_REFUSAL = "[server] --ds4-fused-decode and --ds4-expert-top-k currently require single-device HIP DeepSeek4"

stopping = False


def tokens(prompt: str, count: int) -> list[int]:
    seed = hashlib.sha256(prompt.encode()).digest()
    out = []
    for i in range(count):
        seed = hashlib.sha256(seed + i.to_bytes(4, "little")).digest()
        out.append(int.from_bytes(seed[:2], "little") % 5000)
    return out


def env_flag(name: str, prefix: str) -> bool:
    value = os.environ.get(prefix + name, "")
    return value != "" and value != "0"


def log(text: str, to_stdout: bool = False) -> None:
    stream = sys.stdout if to_stdout else sys.stderr
    stream.write(text + "\n")
    stream.flush()


def on_signal(signum: int, frame: object) -> None:
    global stopping
    stopping = True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")  # the real default
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--max-ctx", type=int, default=131072)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--target-device", default="cuda:0")
    parser.add_argument("--ds4-fused-decode", action="store_true")
    parser.add_argument("--ds4-prefill")
    args = parser.parse_args()
    if args.ds4_fused_decode and not args.target_device.startswith("hip"):
        log(FUSED_REFUSAL)
        return 2

    behaviour = os.environ.get("FOREIGN_BEHAVIOUR", "good")
    prefix = "LUCE_DS4_" if behaviour == "luce-only" else "DFLASH_DS4_"
    spec_asked = env_flag("SPEC", prefix)
    exact = env_flag("SPEC_REFERENCE_EXACT", prefix)
    trace_on = env_flag("EXACT_VERIFY_TRACE", prefix)
    q = int(os.environ.get(prefix + "SPEC_Q", "4") or "4")
    spec = spec_asked and behaviour != "no-draft"
    if spec_asked and not spec:
        log(f"[deepseek4] DSpark drafter load FAILED: {os.environ.get(prefix + 'DRAFT', '')}: not a draft model")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def reply(self, code: int, body: object, drip: bool = False) -> None:
            self.reply_bytes(code, json.dumps(body).encode(), drip)

        def reply_bytes(self, code: int, data: bytes, drip: bool = False) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            if drip:  # every byte a socket read of its own, each well within any per-read timeout
                self.wfile.flush()
                for i in range(len(data)):
                    if stopping:
                        break
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(float(os.environ.get("FOREIGN_DRIP_S", "0.5")))
            else:
                self.wfile.write(data)
            self.wfile.flush()
            self.close_connection = True

        def do_GET(self) -> None:
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            elif self.path == "/props" and behaviour == "crash-on-props":
                print("GGML_ASSERT(props) failed: foreign crash on /props", file=sys.stderr, flush=True)
                os._exit(9)
            elif self.path == "/props" and behaviour == "nan-props":
                self.reply(200, {"server": {"name": "foreign", "version": "9.9"}, "speed": float("nan")})
            elif self.path == "/props" and behaviour == "endless-props":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n")
                try:
                    while not stopping:  # until ds4ci closes the connection
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    pass
                self.close_connection = True
            elif self.path == "/props" and behaviour == "deep-props":
                self.reply_bytes(200, b"[" * 30_000 + b"]" * 30_000)
            elif self.path == "/props":
                self.reply(200, {"server": {"name": "foreign", "version": "9.9"}})
            else:
                self.reply(404, {"error": {"message": "unknown endpoint"}})

        def lines_for(self, body: dict) -> tuple[list[tuple[str, bool]], list[int]]:
            sampled = (
                float(body.get("temperature", 0)) > 0
                or float(body.get("presence_penalty", 0)) != 0
                or float(body.get("frequency_penalty", 0)) != 0
                or float(body.get("repetition_penalty", body.get("rep_pen", 1))) > 1
            )
            speculating = spec and not sampled
            n = int(body["max_tokens"])
            out: list[tuple[str, bool]] = []
            if behaviour == "upstream-lines":
                if spec:
                    out += [(UPSTREAM_TRACE_SPEC, False), (UPSTREAM_BANNER, False), (UPSTREAM_SUMMARY, False)]
                else:
                    out.append((UPSTREAM_TRACE_TARGET, False))
                return out, [8, 13, 21]
            ids = tokens(body["messages"][0]["content"], n)
            if behaviour == "silent":  # its own kind of log line, never one of the DS4 families
                return [(f"srv  update_slots: id 0 | task 1 | n_predict = {n}, prompt done", False)], ids
            if speculating and behaviour == "mismatch":
                ids[5] += 1
            if speculating:
                gen = n - 1
                steps = gen // q + 1
                offered = steps * (q - 1)
                matched = gen - steps
                out.append(("[ds4-spec] reference-exact verifier: foreign sequential verify", False))
                if behaviour == "failure-line":
                    out.append((os.environ.get("FOREIGN_FAILURE_LINE", "[ds4-spec] verify failed"), False))
                mean = f"{matched / steps:.2f}/{offered / steps:.2f}"
                count = "" if behaviour == "no-counters" else f" matched={matched} offered={offered}"
                out.append((f"[ds4-spec] gen={gen} steps={steps}{count} mean_accept={mean} q_cap={q} full_snap=1", False))
            if trace_on:
                flags = f"reference_exact={int(spec_asked and exact)} speculation={int(speculating)}"
                out.append((f"[ds4-exact-verify-trace] {flags} n={n} ids=[{' '.join(map(str, ids))}]",
                            behaviour == "trace-stdout"))
            return out, ids

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if behaviour == "crash-on-request" or (behaviour == "crash-on-spec-request" and spec_asked):
                os._exit(9)
            lines, ids = self.lines_for(body)
            late = behaviour == "summary-after-response"
            if not late:
                for text, to_stdout in lines:
                    log(text, to_stdout)
            if behaviour == "deep-answer":
                self.reply_bytes(200, b"[" * 30_000 + b"]" * 30_000)
                return
            self.reply(200, {
                "object": "chat.completion",
                # the real server's answer shape: the text of the tokens the trace lists, their count
                "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(f"w{i}" for i in ids)},
                             "finish_reason": "length"}],
                "usage": {"completion_tokens": len(ids)},
                **({"score": float("nan"), "rate": float("inf")} if behaviour == "nan-answer" else {}),
            }, drip=behaviour == "drip-answer")
            if late:
                for text, to_stdout in lines:
                    log(text, to_stdout)

    if behaviour == "fill-tmp":
        written = 0
        try:
            for i in range(168):
                with open(f"/tmp/fill-{i}", "wb") as fh:
                    fh.write(b"f" * (1 << 20))
                written += 1
        except OSError as exc:
            log(f"fill-tmp: stopped after {written} MiB: {exc}")
    server = HTTPServer((args.host, args.port), Handler)
    server.timeout = 0.2
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stopping:
        server.handle_request()  # one request at a time; a signal mid-request lets it finish
    if behaviour == "slow-teardown":
        time.sleep(float(os.environ.get("FOREIGN_TEARDOWN_S", "120")))
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A server that is not ds4ci's: an independent, minimal speaker of the protocol in design.md.

Written separately from ds4ci-sim so the gate is proven against a program we did not design
together with it. Behaviour knob: FOREIGN_BEHAVIOUR = good | mismatch | crash-on-request.
"""

import argparse
import hashlib
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def tokens(prompt: str, count: int) -> list[int]:
    seed = hashlib.sha256(prompt.encode()).digest()
    out = []
    for i in range(count):
        seed = hashlib.sha256(seed + i.to_bytes(4, "little")).digest()
        out.append(int.from_bytes(seed[:2], "little") % 5000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-ctx", type=int)
    parser.add_argument("--chunk", type=int)
    parser.add_argument("--target-device")
    parser.add_argument("--ds4-fused-decode", action="store_true")
    parser.add_argument("--ds4-prefill")
    args = parser.parse_args()
    spec = os.environ.get("DFLASH_DS4_SPEC") == "1"
    exact = os.environ.get("DFLASH_DS4_SPEC_REFERENCE_EXACT") == "1"
    q = int(os.environ.get("DFLASH_DS4_SPEC_Q", "1"))
    behaviour = os.environ.get("FOREIGN_BEHAVIOUR", "good")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def reply(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            elif self.path == "/props":
                self.reply(200, {"server": {"name": "foreign", "version": "9.9"}})
            else:
                self.reply(404, {})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if behaviour == "crash-on-request":
                os._exit(9)
            n = int(body["max_tokens"])
            ids = tokens(body["messages"][0]["content"], n)
            if spec and behaviour == "mismatch":
                ids[5] += 1
            flags = f"reference_exact={int(spec and exact)} speculation={int(spec)}"
            print(f"[ds4-exact-verify-trace] {flags} n={n} ids=[{' '.join(map(str, ids))}]", file=sys.stderr)
            if spec:
                steps = (n - 1) // q + 1
                offered = steps * (q - 1)
                matched = n - 1 - steps
                print("[ds4-spec] reference-exact verifier: foreign sequential verify", file=sys.stderr)
                print(f"[ds4-spec] gen={n} steps={steps} matched={matched} offered={offered} "
                      f"mean_accept={matched}/{offered} q_cap={q} full_snap=1", file=sys.stderr)
            sys.stderr.flush()
            self.reply(200, {"choices": [{"message": {"role": "assistant", "content": "x"}}]})

    HTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()

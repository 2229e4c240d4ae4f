#!/usr/bin/env python3
"""A server that replays a captured crash log: it prints the log's start-up part, listens, and on
the first completion prints the rest of the log to stderr and aborts (SIGABRT), as the real
dflash_server did on an H200 (tests/data/real-server/h200-q2-crash.stderr.log).

CRASH_LOG: the log to replay (lines up to and including ``listening on`` are printed at start-up).
CRASH_PAD: extra lines printed after the start-up part (a server that talks a lot before it dies).
Stdlib only.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

LINES = open(os.environ["CRASH_LOG"], encoding="utf-8").read().splitlines()  # noqa: SIM115
SPLIT = next(i for i, line in enumerate(LINES) if "listening on" in line) + 1


def say(lines: list[str]) -> None:
    sys.stderr.write("".join(line + "\n" for line in lines))
    sys.stderr.flush()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json({"status": "ok"})
        else:
            self._json({"server": {"name": "crash-replay", "version": "0"}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        say(LINES[SPLIT:])
        os.abort()


def main() -> None:
    port = int(sys.argv[sys.argv.index("--port") + 1])
    say(LINES[:SPLIT])
    pad = int(os.environ.get("CRASH_PAD", "0"))
    say([f"[server] chatter line {i}: " + "x" * 150 for i in range(pad)])
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()

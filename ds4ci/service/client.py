"""``ds4ci service request``: ask the runner's gate service to gate one commit; the gate's exit code back.

The client writes the files the service streams (results.json, the bundle) itself, as the caller's
user, each into a fresh temporary file beside its destination that becomes the destination only
once its size and SHA-256 match the trailer; an existing destination is never replaced. The gate's
own output (the table) is printed. Exit codes are the gate's: 0 pass, 1 fail, 2 a refused request
or bad flag, 3 no verdict (busy, unreachable, a broken conversation, or the gate's own 3).
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Final

from ds4ci.errors import EXIT_ERROR, EXIT_USAGE, NoVerdictError, UsageError
from ds4ci.service.protocol import (
    MAX_CONTROL,
    PROTOCOL,
    VERB,
    FrameError,
    RequestRefused,
    parse_request,
    recv_file,
    recv_json,
    send_json,
)

MAX_RESULTS: Final = 64 * 1024 * 1024
MAX_LOG: Final = 5 * 1024 * 1024
DEFAULT_MAX_BUNDLE_MIB: Final = 4096


def _out(path: Path, flag: str) -> Path:
    if path.exists() or path.is_symlink():
        raise UsageError(f"{flag} {path} exists; expected a new path (earlier output is never replaced)")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: the folder {path.parent} does not exist")
    return path


def _say(message: str) -> None:
    print(f"ds4ci service request: {message}", file=sys.stderr, flush=True)


def request(socket_path: Path, checkout: Path, head: str, base: str, runner: str, widths: str | None,
            bundle_out: Path, results_out: Path, max_bundle_mib: int = DEFAULT_MAX_BUNDLE_MIB) -> int:
    if not checkout.is_dir():
        raise UsageError(f"--checkout {checkout}: expected the git checkout to gate, found no folder there")
    outs = {"results": (_out(results_out, "--results-out"), MAX_RESULTS),
            "bundle": (_out(bundle_out, "--bundle-out"), max_bundle_mib * 1024 * 1024)}
    req = parse_request({"protocol": PROTOCOL, "verb": VERB, "checkout": str(checkout.resolve()), "head": head,
                         "base": base, "runner": runner, "widths": widths})  # RequestRefused (2) before connecting
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            conn.connect(str(socket_path))
        except OSError as exc:
            raise NoVerdictError(f"cannot reach the gate service at {socket_path}: {exc.strerror or exc}; is it "
                                 "running (systemctl status ds4ci-gate.socket; docs/service.md)?") from exc
        send_json(conn, req.doc())
        return _converse(conn, outs)
    except FrameError as exc:
        raise NoVerdictError(f"the service's answer broke off: {exc}; no verdict") from exc
    except OSError as exc:
        raise NoVerdictError(f"the conversation with the gate service failed: {exc.strerror or exc}") from exc
    finally:
        conn.close()


def _converse(conn: socket.socket, outs: dict[str, tuple[Path, int]]) -> int:
    while True:
        answer = recv_json(conn, MAX_CONTROL, "answer")
        status, message = answer.get("status"), str(answer.get("message", ""))
        if status == "queued":
            _say(f"queued as request {answer.get('request')}, place {answer.get('position')} on this runner's queue")
        elif status == "running":
            _say("the gate is running")
        elif status == "refused":
            raise RequestRefused(f"the service refused the request: {message}")
        elif status == "busy":
            raise NoVerdictError(f"busy: {message}")
        elif status == "error":
            raise NoVerdictError(f"the service could not gate: {message}")
        elif status == "done":
            return _done(conn, answer, outs)
        else:
            raise FrameError(f"answer: unknown status {status!r:.40}")


def _done(conn: socket.socket, answer: dict[str, Any], outs: dict[str, tuple[Path, int]]) -> int:
    code, names = answer.get("exit_code"), answer.get("files")
    if code not in (0, 1, 2, 3) or isinstance(code, bool) or not isinstance(names, list):
        raise FrameError(f"done: expected an exit code 0-3 and a list of files, found {answer!r:.200}")
    if answer.get("message"):
        _say(str(answer["message"]))
    for name in names:
        header = recv_json(conn, MAX_CONTROL, "file header")
        if header.get("file") != name or name not in ("results", "bundle", "stdout", "stderr"):
            raise FrameError(f"file: expected {name!r:.40} (one of results, bundle, stdout, stderr), found "
                             f"{header.get('file')!r:.40}")
        if name in outs:
            path, cap = outs[name]
            _receive_to(conn, header, cap, path)
            print(f"{name}: {path}", flush=True)
        else:
            buffer = io.BytesIO()
            recv_file(conn, header, MAX_LOG, buffer)
            stream = sys.stdout if name == "stdout" else sys.stderr
            # As text, through the stream ds4ci guards: the gate's output quotes what the pull request printed.
            stream.write(buffer.getvalue().decode("utf-8", "replace"))
            stream.flush()
    missing = [flag for name, flag in (("results", "--results-out"), ("bundle", "--bundle-out")) if name not in names]
    if code in (0, 1) and missing:  # a verdict stands only with its files
        raise NoVerdictError(f"the gate exited {code} but the service sent nothing for {', '.join(missing)}; "
                             "no verdict")
    if code == EXIT_USAGE:
        _say("the gate refused its configuration (exit 2): the trusted branch's config, see the gate's message above")
    return int(code) if isinstance(code, int) else EXIT_ERROR


def _receive_to(conn: socket.socket, header: dict[str, Any], cap: int, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            out: BinaryIO = fh
            recv_file(conn, header, cap, out)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)  # fails rather than replace a file that appeared meanwhile
    except FileExistsError as exc:
        raise NoVerdictError(f"{path} appeared while the answer came; nothing was replaced") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()

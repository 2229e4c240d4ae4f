"""The models of one server, one completion at a time, and the protocol lines each request prints.

Lines go to stderr whole and flushed, before the response is sent, in the DS4 server's exact
formats (the gate cuts the log per request by offset):

    [ds4-spec] reference-exact verifier: <free text>            (speculative, reference-exact)
    [ds4-exact-verify-trace] reference_exact=<0|1> speculation=<0|1> n=<N> ids=[<id> ...]
    [ds4-spec] gen=<n-1> steps=<S> matched=<M> offered=<O> mean_accept=<%.2f>/<%.2f> q_cap=<q> full_snap=1

The trace only with the trace variable set; banner and summary only for a request that really
speculated. With ``DS4_TIMING`` a speculative request also prints the spec loop's compare lines
(first 8 steps) and timing lines (steps 1..4 and every 32nd), with ``DS4_TOKEN_TRACE`` one line per
token the loop emits, in the real build's formats:

    [ds4-spec-cmp] step=<s> pos=<p> draft=[<id> <id> <id>] tgt=[<id> <id> <id> <id>] acc=<n>
    [ds4-spec-t] step=<s+1> q=<q> acc=<n> | ...
    [ds4-spec-token] out=<i> step=<s> slot=<k> token=<id>[ bonus]

A target that is a GGUF file written by ``ds4ci tiny-models`` is served by the tiny models'
double (``tinydouble``) with the DS4 chat template over their vocabulary; any other file is a
model of its own (``modelfile``). A draft that does not load does not stop the server: it serves without speculation,
and says so at start.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from ds4ci import __version__
from ds4ci.refserver.api import ChatRequest, Completion, piece, tokenize
from ds4ci.refserver.args import Args
from ds4ci.refserver.decoding import Counters, Model, Output, StepDetail, decode_plain, decode_speculative
from ds4ci.refserver.env import RefEnv
from ds4ci.refserver.faults import ENGINE_MUTANTS
from ds4ci.refserver.model import DTYPES, Decoder, derive_tensors, generate_tensors
from ds4ci.refserver.modelfile import ModelFile, ModelFileError, is_gguf, read_model_file

BANNER = (
    "[ds4-spec] reference-exact verifier: single-token target verification of the drafts after a cache snapshot, "
    "restore and single-token replay of the accepted tokens after a rejection"
)
APPROXIMATE_NOTE = "[ds4-spec] fused verifier (approximate): the batched verification's tokens are kept"


class StartupError(RuntimeError):
    """The server cannot serve with these files, devices or settings (exit 1)."""


class RequestRefused(ValueError):
    """A well-formed request this server cannot serve (HTTP 400), e.g. one longer than --max-ctx."""


class Log:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()


def trace_line(reference_exact: bool, speculation: bool, ids: Sequence[int]) -> str:
    return (
        f"[ds4-exact-verify-trace] reference_exact={int(reference_exact)} speculation={int(speculation)} "
        f"n={len(ids)} ids=[{' '.join(str(i) for i in ids)}]"
    )


def summary_line(generated: int, counters: Counters, q: int) -> str:
    steps = counters.steps
    mean = (counters.matched / steps, counters.offered / steps) if steps else (0.0, 0.0)
    return (
        f"[ds4-spec] gen={max(generated - 1, 0)} steps={steps} matched={counters.matched} offered={counters.offered} "
        f"mean_accept={mean[0]:.2f}/{mean[1]:.2f} q_cap={q} full_snap=1"
    )


COMPARE_STEPS = 8
COMPARE_DRAFTS = 3


def _slots(values: Sequence[int], count: int) -> str:
    return " ".join(str(v) for v in [*values[:count], *[-1] * max(count - len(values), 0)])


def step_lines(details: Sequence[StepDetail], timing: bool, tokens: bool) -> list[str]:
    """The spec loop's per-step and per-token lines, in its order: compare line, tokens, timing line."""
    lines = []
    out = 0
    for step, d in enumerate(details):
        if timing and step < COMPARE_STEPS and len(d.drafts) <= COMPARE_DRAFTS:  # the line has 3 draft slots
            lines.append(f"[ds4-spec-cmp] step={step} pos={d.position} draft=[{_slots(d.drafts, 3)}] "
                         f"tgt=[{_slots(d.targets, 4)}] acc={d.accepted + 1}")
        for slot, token in enumerate(d.emitted, start=1):
            if tokens:
                bonus = " bonus" if slot == d.accepted + 1 else ""
                lines.append(f"[ds4-spec-token] out={out} step={step} slot={slot} token={token}{bonus}")
            out += 1
        after = step + 1
        if timing and (after <= 4 or after % 32 == 0):
            lines.append(f"[ds4-spec-t] step={after} q={len(d.drafts) + 1} acc={d.accepted + 1} | draft=0.0 head=0.0 "
                         "save=0.0 verify=0.0 probe(submit/wait)=0.0/0.0 apply=0.0 feat=0.0 ms (cum means)")
    return lines


def _byte_tokens(vocab: int) -> Callable[[ChatRequest], list[int]]:
    return lambda request: tokenize(request.prompt_text, vocab)


@dataclass(frozen=True)
class Loaded:
    target: Model
    target_file: ModelFile
    draft: Model | None
    draft_file: ModelFile | None
    draft_error: str | None
    tokens: Callable[[ChatRequest], list[int]]
    piece: Callable[[int], str] = piece
    tiny: bool = False  # served by the tiny models' double


def _device(args: Args) -> torch.device:
    if args.torch_device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise StartupError(f"--target-device {args.target_device}: PyTorch sees no CUDA/HIP device")
        index = int(args.torch_device.split(":", 1)[1])
        if index >= torch.cuda.device_count():
            raise StartupError(
                f"--target-device {args.target_device}: only {torch.cuda.device_count()} device(s) are visible"
            )
    return torch.device(args.torch_device)


def load(args: Args, env: RefEnv) -> Loaded:
    device = _device(args)
    dtype = DTYPES[env.dtype]
    try:
        target_file = read_model_file(args.target, "target")
    except ModelFileError as exc:
        raise StartupError(str(exc)) from exc
    assert target_file.arch is not None
    if _gguf(args.target):
        return _load_tiny(target_file, env)
    if env.fault is not None and env.fault.name in ENGINE_MUTANTS:
        raise StartupError(f"DS4REF_FAULT={env.fault.name} is an engine mutant: it needs a `ds4ci tiny-models` target "
                           "(the tiny models' double has the engine's cache), found a model of this server's own")
    base = generate_tensors(target_file.arch, target_file.sha256)
    target = Decoder(target_file.arch, base, dtype, device)
    tokens = _byte_tokens(target_file.arch.vocab)
    if not env.spec:
        return Loaded(target, target_file, None, None, None, tokens)
    if env.draft is None:
        return Loaded(target, target_file, None, None, "DS4_SPEC=1 but no DS4_DRAFT file was given", tokens)
    try:
        draft_file = read_model_file(env.draft, "draft")
    except ModelFileError as exc:
        return Loaded(target, target_file, None, None, str(exc), tokens)
    if draft_file.arch is None:
        assert draft_file.noise is not None
        tensors = derive_tensors(target_file.arch, base, draft_file.sha256, draft_file.noise)
        arch = target_file.arch
    else:
        if draft_file.arch.vocab != target_file.arch.vocab:
            return Loaded(target, target_file, None, draft_file,
                          f"draft vocabulary {draft_file.arch.vocab} differs from the target's {target_file.arch.vocab}",
                          tokens)
        arch = draft_file.arch
        tensors = generate_tensors(arch, draft_file.sha256)
    return Loaded(target, target_file, Decoder(arch, tensors, dtype, device), draft_file, None, tokens)


def _gguf(path: Path) -> bool:
    try:
        return is_gguf(path)
    except OSError as exc:
        raise StartupError(f"{path}: cannot read the target model file ({exc.strerror or exc})") from exc


def _load_tiny(target_file: ModelFile, env: RefEnv) -> Loaded:
    """The tiny models' double (CPU numpy; the device and dtype do not apply to it). Imported here: it needs
    NumPy and gguf, which a server of its own models does not."""
    from ds4ci.refserver.tinydouble import TinyDraft, TinyModelError, TinyTarget, chat_tokens, tiny_piece

    def tokens(request: ChatRequest) -> list[int]:
        return chat_tokens(request.messages)

    try:
        target = TinyTarget(target_file.path, target_file.sha256)
    except TinyModelError as exc:
        raise StartupError(str(exc)) from exc

    def loaded(draft: TinyDraft | None = None, draft_file: ModelFile | None = None, error: str | None = None) -> Loaded:
        return Loaded(target, target_file, draft, draft_file, error, tokens, tiny_piece, tiny=True)

    if not env.spec:
        return loaded()
    if env.draft is None:
        return loaded(error="DS4_SPEC=1 but no DS4_DRAFT file was given")
    try:
        draft_file = read_model_file(env.draft, "draft")
        draft = TinyDraft(env.draft, target)
    except (ModelFileError, TinyModelError) as exc:
        return loaded(error=str(exc))
    return loaded(draft, draft_file)


class Engine:
    """Completions run on one worker thread (see ``http``); this class holds no locks of its own."""

    def __init__(self, args: Args, env: RefEnv, loaded: Loaded, log: Log) -> None:
        self.args = args
        self.env = env
        self.loaded = loaded
        self.log = log
        self.requests = 0

    @property
    def speculative(self) -> bool:
        return self.loaded.draft is not None and self.env.q >= 2

    def describe(self) -> None:
        a, e, m = self.args, self.env, self.loaded
        self.log.line(f"ds4ci-refserver {__version__}: torch {torch.__version__}, device {a.target_device} "
                      f"(torch {a.torch_device}{self._device_name()}), dtype {e.dtype}")
        self.log.line(f"load_model: target {a.target} sha256={m.target_file.sha256} "
                      f"{m.target.arch.describe()} max_ctx={a.max_ctx} chunk={a.chunk} prefill={a.prefill}")
        if m.draft_error is not None:
            self.log.line(f"[ds4-spec] draft not loaded ({m.draft_error}); serving without speculation")
        elif m.draft is not None and m.draft_file is not None:
            if m.tiny:
                kind = "tiny DSpark draft double: Markov head from the file"
            elif m.draft_file.arch is None:
                kind = f"target + {m.draft_file.noise:g} relative noise"
            else:
                kind = m.draft.arch.describe()
            verifier = "approximate (fused)" if e.approximate else "reference-exact"
            if e.leak_fused_verify:
                verifier += ", leaked while claiming reference-exact (DS4REF_LEAK_FUSED_VERIFY fault)"
            if e.fault is not None:
                verifier += f", planted fault {e.fault.name} seed {e.fault.seed} while claiming reference-exact"
            self.log.line(f"[ds4-spec] speculation on: draft {m.draft_file.path} sha256={m.draft_file.sha256} "
                          f"({kind}), q {e.q}, verifier {verifier}")
        if e.trace:
            self.log.line("ds4: exact verify trace enabled")

    def _device_name(self) -> str:
        if self.args.torch_device.startswith("cuda"):
            return f", {torch.cuda.get_device_name(torch.device(self.args.torch_device))}"
        return ""

    def props(self) -> dict[str, Any]:
        a, e, m = self.args, self.env, self.loaded
        return {
            "server": {"name": "ds4ci-refserver", "version": __version__},
            "model": {
                "target": str(a.target),
                "target_sha256": m.target_file.sha256,
                "target_arch": m.target.arch.describe(),
                "draft": None if m.draft_file is None else str(m.draft_file.path),
                "draft_sha256": None if m.draft_file is None else m.draft_file.sha256,
                "draft_loaded": m.draft is not None,
            },
            "settings": {
                "target_device": a.target_device, "torch_device": a.torch_device, "dtype": e.dtype,
                "max_ctx": a.max_ctx, "chunk": a.chunk, "prefill": a.prefill, "fused_decode": a.fused_decode,
                "spec": self.speculative, "q": e.q if self.speculative else None,
                "reference_exact": e.claims_reference_exact, "approximate_verify": e.approximate,
                "exact_verify_trace": e.trace,
            },
            "torch": {"version": torch.__version__, "cuda": torch.version.cuda},
        }

    def complete(self, request: ChatRequest) -> Completion:
        index = self.requests
        self.requests += 1
        m, e = self.loaded, self.env
        prompt = m.tokens(request)
        if len(prompt) + request.max_tokens > self.args.max_ctx:
            raise RequestRefused(
                f"prompt ({len(prompt)} tokens) plus max_tokens ({request.max_tokens}) exceeds --max-ctx {self.args.max_ctx}"
            )
        speculate = self.speculative and not request.penalties.forces_plain
        self.log.line(f"slot 0: id {index} | new task, n_prompt_tokens={len(prompt)} n_predict={request.max_tokens} "
                      f"speculative={int(speculate)}")
        out = Output(request.max_tokens, request.stop, m.piece)
        started = time.monotonic()
        counters: Counters | None = None
        if speculate:
            assert m.draft is not None
            if e.claims_reference_exact:
                self.log.line(BANNER)
            else:
                self.log.line(APPROXIMATE_NOTE)
            exact = not e.approximate
            fault = e.fault.arm(prompt, index) if e.fault is not None and exact else None
            counters = decode_speculative(m.target, m.draft, prompt, out, self.args.chunk, e.q, exact, fault)
            for line in step_lines(counters.details, e.timing, e.token_trace):
                self.log.line(line)
        else:
            decode_plain(m.target, prompt, out, self.args.chunk, request.penalties)
        elapsed = time.monotonic() - started
        if e.trace:
            self.log.line(trace_line(e.claims_reference_exact, speculate, out.ids))
        if counters is not None:
            self.log.line(summary_line(len(out.ids), counters, e.q))
        self.log.line(f"slot 0: id {index} | done, n_tokens={len(out.ids)} finish={out.finish_reason} "
                      f"{elapsed * 1000.0:.1f} ms")
        prefill_s = out.first_token_s - started if out.first_token_s is not None else elapsed
        return Completion(tuple(out.ids), out.text, out.finish_reason, len(prompt), prefill_s,
                          max(elapsed - prefill_s, 0.0), counters)

"""``python -m ds4ci.refserver.matrix``: measure the three decoders against each other, in process.

For each dtype and draft kind, every prompt is decoded target-only twice (self-consistency),
then reference-exact and approximate at each width; each speculative sequence is compared with
greedy (equal, first differing position) and its counters are kept. Raw JSON goes to --out, a
table to stdout. No HTTP: this isolates the numerics (the gate run covers the protocol).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ds4ci.refserver.modelfile import DEFAULT_ARCH, DEFAULT_DRAFT_NOISE, Arch, header_line

DRAFT_KINDS = {
    "noisy": "the target plus 2 % noise",
    "independent": "an independent random model, 1 layer, 256 wide",
}
INDEPENDENT_DRAFT = Arch(vocab=DEFAULT_ARCH.vocab, dim=256, layers=1, heads=4, ffn=704)


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    n = min(len(a), len(b))
    pos = next((i for i in range(n) if a[i] != b[i]), n)
    return None if pos == n and len(a) == len(b) else pos


def nvidia_smi() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = "name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu"
    try:
        done = subprocess.run([exe, f"--query-gpu={query}", "--format=csv"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi failed: {exc}"
    return (done.stdout or done.stderr).strip()


def host_info(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info |= {"device_name": props.name, "capability": f"{props.major}.{props.minor}",
                 "multiprocessors": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1)}
    return info


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _prompt_run(target: Any, draft: Any, ids: list[int], widths: Sequence[int], max_tokens: int,
                chunk: int) -> tuple[list[list[int]], list[float], list[dict[str, Any]]]:
    """Greedy twice (self-consistency), then every width in both verification modes, for one prompt."""
    from ds4ci.refserver.api import piece
    from ds4ci.refserver.decoding import Output, Penalties, decode_plain, decode_speculative

    greedy, greedy_s = [], []
    for _ in range(2):
        out = Output(max_tokens, (), piece)
        t1 = time.monotonic()
        decode_plain(target, ids, out, chunk, Penalties())
        greedy_s.append(round(time.monotonic() - t1, 4))
        greedy.append(out.ids)
    cases = []
    for q in widths:
        for mode in ("reference-exact", "approximate"):
            out = Output(max_tokens, (), piece)
            t1 = time.monotonic()
            counters = decode_speculative(target, draft, ids, out, chunk, q, exact=mode == "reference-exact")
            seconds = round(time.monotonic() - t1, 4)
            diff = _first_diff(greedy[0], out.ids)
            cases.append({"mode": mode, "q": q, "equal": diff is None, "first_diff": diff,
                          "seconds": seconds, **asdict(counters), "ids": out.ids})
    return greedy, greedy_s, cases


def _draft(kind: str, base: Any, dtype: Any, dev: Any) -> Any:
    from ds4ci.refserver.model import Decoder, derive_tensors, generate_tensors

    draft_sha = _sha(header_line(draft_noise=DEFAULT_DRAFT_NOISE, comment="ds4ci self-test draft"))
    if kind == "noisy":
        return Decoder(DEFAULT_ARCH, derive_tensors(DEFAULT_ARCH, base, draft_sha, DEFAULT_DRAFT_NOISE), dtype, dev)
    return Decoder(INDEPENDENT_DRAFT, generate_tensors(INDEPENDENT_DRAFT, _sha("independent draft")), dtype, dev)


def run_matrix(device: str, dtypes: Sequence[str], widths: Sequence[int], prompts: int, max_tokens: int,
               drafts: Sequence[str], chunk: int = 512) -> dict[str, Any]:
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch

    from ds4ci.refserver.api import render_chat, tokenize
    from ds4ci.refserver.model import DTYPES, Decoder, generate_tensors
    from ds4ci.refserver.workload import prompt_texts

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(device)
    # The same bytes the self-test writes, so the weights are the self-test's weights.
    base = generate_tensors(DEFAULT_ARCH, _sha(header_line(arch=DEFAULT_ARCH, comment="ds4ci self-test target")))
    texts = prompt_texts(prompts)
    runs: list[dict[str, Any]] = []
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        t0 = time.monotonic()
        target = Decoder(DEFAULT_ARCH, base, dtype, dev)
        load_s = time.monotonic() - t0
        for kind in drafts:
            draft = _draft(kind, base, dtype, dev)
            for index, text in enumerate(texts):
                ids = tokenize(render_chat([("user", text)]), DEFAULT_ARCH.vocab)
                greedy, greedy_s, cases = _prompt_run(target, draft, ids, widths, max_tokens, chunk)
                runs.append({"dtype": dtype_name, "draft": kind, "prompt_index": index, "target_load_s": round(load_s, 3),
                             "greedy_self_consistent": greedy[0] == greedy[1], "greedy_s": greedy_s,
                             "greedy_ids": greedy[0], "cases": cases})
                print(f"{dtype_name} {kind} p{index}: " + " ".join(
                    f"{c['mode'][:5]}q{c['q']}={'=' if c['equal'] else c['first_diff']}({c['matched']}/{c['offered']})"
                    for c in cases), file=sys.stderr, flush=True)
    return {"host": host_info(device), "nvidia_smi": nvidia_smi(),
            "settings": {"max_tokens": max_tokens, "widths": list(widths), "prompts": prompts, "chunk": chunk,
                         "target_arch": asdict(DEFAULT_ARCH), "draft_noise": DEFAULT_DRAFT_NOISE,
                         "independent_draft_arch": asdict(INDEPENDENT_DRAFT), "drafts": list(drafts)},
            "runs": runs, "summary": summarize(runs)}


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    greedy: dict[tuple[str, str], list[bool]] = {}
    for run in runs:
        greedy.setdefault((run["dtype"], run["draft"]), []).append(run["greedy_self_consistent"])
        for case in run["cases"]:
            groups.setdefault((run["dtype"], run["draft"], case["mode"], case["q"]), []).append(case)
    out = []
    for (dtype, draft, mode, q), cases in groups.items():
        out.append({
            "dtype": dtype, "draft": draft, "mode": mode, "q": q,
            "equal": sum(c["equal"] for c in cases), "prompts": len(cases),
            "first_diffs": [c["first_diff"] for c in cases if not c["equal"]],
            "matched": [c["matched"] for c in cases], "offered": [c["offered"] for c in cases],
            "steps": [c["steps"] for c in cases],
            "rejection_all": all(c["matched"] < c["offered"] for c in cases),
            "mean_seconds": round(sum(c["seconds"] for c in cases) / len(cases), 4),
            "greedy_self_consistent": f"{sum(greedy[(dtype, draft)])}/{len(greedy[(dtype, draft)])}",
        })
    return out


def table(summary: Sequence[dict[str, Any]]) -> str:
    head = "dtype    | draft       | mode            | q | equal | first diffs          | matched/offered (min-max) | s/request"
    lines = [head, "-" * len(head)]
    for s in summary:
        ratio = f"{min(s['matched'])}-{max(s['matched'])}/{min(s['offered'])}-{max(s['offered'])}"
        diffs = ",".join(str(d) for d in s["first_diffs"]) or "-"
        lines.append(f"{s['dtype']:<8} | {s['draft']:<11} | {s['mode']:<15} | {s['q']} | {s['equal']}/{s['prompts']:<3} | "
                     f"{diffs:<20} | {ratio:<25} | {s['mean_seconds']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ds4ci.refserver.matrix", description=__doc__)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--widths", default="2,3,4")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--drafts", default="noisy,independent", help=f"comma-separated of {', '.join(DRAFT_KINDS)}")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    drafts = a.drafts.split(",")
    if set(drafts) - set(DRAFT_KINDS):
        p.error(f"--drafts: expected some of {', '.join(DRAFT_KINDS)}")
    device = "cuda:" + a.device.split(":", 1)[1] if a.device.startswith("hip:") else a.device
    started = time.monotonic()
    doc = run_matrix(device, a.dtypes.split(","), [int(q) for q in a.widths.split(",")], a.prompts, a.max_tokens, drafts)
    doc["wall_s"] = round(time.monotonic() - started, 2)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table(doc["summary"]))
    print(f"wall {doc['wall_s']} s; raw JSON: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

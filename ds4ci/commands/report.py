"""`ds4ci report`: render results.json files as the PR comment or the job summary."""

from __future__ import annotations

import sys
from pathlib import Path

from ds4ci.errors import UsageError
from ds4ci.textsafe import neutralise


def run_report(
    results: list[Path],
    fmt: str = "comment",
    template_dir: Path | None = None,
    output: Path | None = None,
    run_url: str | None = None,
    bisect: Path | None = None,
    calibrations: Path | None = None,
) -> int:
    from ds4ci.calibrate.latest import cite_all
    from ds4ci.report import render

    if fmt not in ("comment", "summary", "junit"):
        raise UsageError(f"--format {fmt!r}: expected 'comment', 'summary' or 'junit'")
    if output is not None:  # refused before anything is read: the place is wrong whatever the report says
        from ds4ci.fileio import refuse_inside_checkout

        refuse_inside_checkout(output, "--output")
    if fmt == "junit" and bisect is not None:
        raise UsageError("--bisect adds a section to a comment or summary; --format junit has none")
    from ds4ci.report.docview import load, view_of

    docs = load.load_all(results)
    if fmt == "junit":
        from ds4ci.report import junit

        return _emit(junit.render(docs), output)
    extra = []
    if bisect is not None:
        from ds4ci.report import bisect as bisect_section

        extra.append(bisect_section.section(render.environment(template_dir), bisect_section.load(bisect),
                                            run_url=run_url, kind=fmt))
    if calibrations is not None and not calibrations.is_dir():
        raise UsageError(f"--calibrations {calibrations}: expected a folder of calibration records, found none")
    cited = cite_all(calibrations, [dict(d) for d in docs])
    body, _ = render.render([view_of(d) for d in docs], kind=fmt, run_url=run_url, template_dir=template_dir,
                            extra=extra, calibrations=cited)
    return _emit(body, output)


def _emit(body: str, output: Path | None) -> int:
    if output is None:  # printed in a job's log: no line of it may run a workflow command
        sys.stdout.write(neutralise(body))
        sys.stdout.flush()
        return 0
    from ds4ci.fileio import write_new

    try:
        write_new(output, body.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"--output {output}: cannot write the report ({exc.strerror or exc})") from exc
    return 0

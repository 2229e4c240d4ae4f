"""One view per runner: under ds4ci/report and ds4ci/github only the view builder (ds4ci/report/docview) reads a
results document; every other module reads the DocView it builds.

A module reads a document when it names one of the document's types (``Results`` or any record inside it), calls
the results loader, subscripts something with one of the document's own keys (``doc["widths"]``), or reaches
through a view for the document itself (``view.source``) or its folded detail (``view.shown``).
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import ds4ci
from ds4ci import records

PACKAGE = Path(ds4ci.__file__).resolve().parent
BUILDER = PACKAGE / "report" / "docview"
# Each module that may read a document, and why. Nothing else under report/ or github/ does.
READERS = {
    # The trust step: it opens the bundles, verifies them and hands each verified document to the view builder.
    "github/verified.py": "loads and verifies the bundles publish is given",
    # A bisect's own document (BisectResult) has keys a results document has too (runner, verdict).
    "report/bisect.py": "reads `ds4ci bisect --json`, not a runner's results",
}
SHOWN = {"report/views.py"}  # the template's folded detail (``r``) is the view's ``shown``; nothing else reads it


def _document_types() -> set[str]:
    """The names of ``Results`` and every record type inside it."""
    found: set[str] = set()

    def walk(kind: object) -> None:
        for arg in typing.get_args(kind):
            walk(arg)
        if typing.is_typeddict(kind) and kind.__name__ not in found:
            found.add(kind.__name__)
            for hint in typing.get_type_hints(kind).values():
                walk(hint)

    walk(records.Results)
    return found


TYPES = _document_types()
KEYS = set(typing.get_type_hints(records.Results))
LOADERS = {"ds4ci.evidence.results", "ds4ci.report.docview.load", "ds4ci.evidence.derive"}


def _modules() -> list[Path]:
    return sorted(p for folder in ("report", "github") for p in (PACKAGE / folder).rglob("*.py")
                  if BUILDER not in p.parents)


def reads_of(path: Path, rel: str | None = None) -> list[str]:
    """What in ``path`` (``rel`` under the package) reads a results document, one line each."""
    rel = rel or path.relative_to(PACKAGE).as_posix()
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}  # need.source(check) is a method
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ds4ci.records":
            out += [f"imports {a.name}" for a in node.names if a.name in TYPES]
        if isinstance(node, ast.ImportFrom) and node.module in LOADERS:
            out.append(f"imports the loader {node.module}")
        if isinstance(node, ast.ImportFrom) and node.module == "ds4ci.evidence":
            out += [f"imports the loader ds4ci.evidence.{a.name}" for a in node.names if a.name in ("results", "derive")]
        if isinstance(node, ast.Import):
            out += [f"imports the loader {a.name}" for a in node.names if a.name in LOADERS]
        if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str) and node.slice.value in KEYS):
            out.append(f"line {node.lineno}: [{node.slice.value!r}]")
        if isinstance(node, ast.Attribute) and id(node) not in called and (
                node.attr == "source" or (node.attr == "shown" and rel not in SHOWN)):
            out.append(f"line {node.lineno}: .{node.attr}")
    return out


def test_the_builder_is_the_only_reader_of_a_results_document() -> None:
    found = {p.relative_to(PACKAGE).as_posix(): reads for p in _modules() if (reads := reads_of(p))}
    unexpected = {rel: reads for rel, reads in found.items() if rel not in READERS}
    assert not unexpected, f"these read a results document instead of its DocView: {unexpected}"
    assert set(READERS) <= set(found), f"no longer a reader: drop it from READERS: {set(READERS) - set(found)}"


def test_the_scan_sees_a_module_that_reads_the_document(tmp_path: Path) -> None:
    """The scan is not blind: each way of reading a document is caught."""
    module = tmp_path / "reader.py"
    module.write_text("from ds4ci.records import Results, PromptResult, BisectResult\n"
                      "from ds4ci.evidence import results\n"
                      "def f(doc, view):\n    return doc['widths'], view.source, view.shown, doc['id']\n",
                      encoding="utf-8")
    assert reads_of(module, "report/reader.py") == [
        "imports Results", "imports PromptResult", "imports the loader ds4ci.evidence.results",
        "line 4: ['widths']", "line 4: .source", "line 4: .shown"]


def test_every_document_type_is_known() -> None:
    assert {"Results", "PromptResult", "WidthResult", "MismatchRecord", "CoverageRecord"} <= TYPES
    assert "BisectResult" not in TYPES  # a bisect's own document is not a runner's results

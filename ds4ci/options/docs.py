"""``docs/configuration.md``, generated from the options table: ``python -m ds4ci.options.docs``."""

from __future__ import annotations

import sys

from ds4ci.options import table

REGENERATE = "python -m ds4ci.options.docs > docs/configuration.md"
_INTRO = {
    "gate": "The gate's settings. A flag on `ds4ci gate` overrides the key; paths are relative to the file "
            "and may use `${VAR}` (an unset variable is an error).",
    "runner": "This runner's identity. `gate.runner` and `--runner` win over `runner.name`.",
    "runners": "One table per runner, chosen by the runner's name (`--runner`, `gate.runner`, `runner.name`, "
               "else the host name). It may set the keys marked *yes* under \"runner tables\" in `[gate]` and "
               "`[runner]`; a name with no table is an error once any `[runners.<name>]` exists. "
               "Precedence: flag > `[runners.<name>]` > `[gate]`/`[runner]` > default.",
    "build": "How the server under test is built before it is hashed and run (`--no-build` skips it).",
    "checks": "Extra checks, one `[[checks]]` table each, run beside the gate and recorded in results.json.",
    "merge": "What `ds4ci merge-check` (and the comment's merge checklist of `ds4ci publish --merge-config`) "
             "requires; its flags replace the file's values.",
    "merge.checks": "An entry of `merge.checks` written as a table says who may satisfy that check: check runs "
                    "of one GitHub App, commit statuses of one account; runs and statuses from anyone else are "
                    "listed as ignored. A plain name is the table with only `name`.",
    "publish": "What `ds4ci publish` posts besides the comment and the statuses; read from the trusted config "
               "(`--expect-config`).",
    "preflight": "Settings of `ds4ci preflight`.",
    "sandbox": "The bubblewrap sandbox every process of PR code runs in (server, build, checks): an allowlist view "
               "of the file system, a fresh /proc and /dev (standard nodes plus the GPU's), new PID, IPC and UTS "
               "namespaces, no capabilities, an environment without credentials; the server in a network namespace "
               "of its own (no host service in its reach; only ds4ci reaches it), the build and the checks on the "
               "runner's network. docs/security.md says what it hides and why.",
    table.CLI: "Flags of `ds4ci gate` that no file sets.",
}


def _cell(text: str | None) -> str:
    return "" if text is None else text.replace("|", "\\|").replace("\n", " ")


def _code(text: str | None) -> str:
    return "" if not text else f"`{text}`"


def _flag(option: table.Option) -> str:
    if option.flag is None:
        return "(config only)"
    where = "" if option.command == "gate" else f"{option.command} "
    return _code(where + option.flag)


def _rows(section: str) -> list[str]:
    options = table.in_section(section)
    if section == table.CLI:
        return ["| flag | meaning |", "| --- | --- |",
                *(f"| {_code(o.flag)} | {_cell(o.flag_help())} |" for o in options)]
    lines = ["| key | type | default | flag | runner tables | recorded | meaning |", "| --- " * 7 + "|"]
    for o in options:
        default = o.toml_default() if o.default_doc is not None else _code(o.toml_default())
        lines.append(
            f"| {_code(o.key)} | {o.toml_type} | {_cell(default)} | {_flag(o)} | "
            f"{'yes' if o.runner_table else ''} | {_code(o.recorded)} | {_cell(o.help)} |"
        )
    return lines


def render() -> str:
    out = [
        "# Configuration",
        "",
        f"Generated from `ds4ci/options/table.py` by `{REGENERATE}`: edit the table, not this file.",
        "",
        "Every key `ds4ci.toml` accepts, with its type, default, command-line flag, whether a "
        "`[runners.<name>]` table may set it, and the results.json `settings` field it is recorded as. "
        "Any other key is refused: a near miss with \"did you mean\", anything else with the list of allowed ones.",
    ]
    order = [*table.OPTION_SECTIONS[:2], "runners", *table.OPTION_SECTIONS[2:], table.CLI]
    order[order.index("merge") + 1:order.index("merge") + 1] = table.NESTED_SECTIONS
    for section in order:
        out += ["", f"## {table.SECTION_TITLES[section]}", "", _INTRO[section], ""]
        if section == "runners":
            out.append("Keys: " + ", ".join(f"`{k}`" for k in sorted(table.keys("runners"))) + ".")
        else:
            out += _rows(section)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())

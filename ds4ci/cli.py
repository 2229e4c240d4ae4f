"""The ``ds4ci`` entry point: a gate run starts without Typer, everything else goes to the Typer app.

Typer builds its parameters through pydantic, about 0.3 s of imports before a command runs. A
gate run is the one command whose start matters (the first progress line should appear at once),
so ``ds4ci gate ...`` is parsed first by ``commands.fastgate`` from the same options table; any
argument list that parser does not take exactly (``--help`` included) goes to the Typer app, which
parses it and reports any error itself.

Everything the command prints goes through ``textsafe.guard_output``: each line of stdout and stderr is
neutralised (no workflow command in it), whichever part of ds4ci printed it.
"""

from __future__ import annotations

import sys


def main() -> None:
    from ds4ci.textsafe import guard_output

    guard_output()
    argv = sys.argv[1:]
    if argv[:1] == ["gate"]:
        from ds4ci.commands import fastgate

        params = fastgate.parse(argv[1:])
        if params is not None:
            sys.exit(fastgate.run(params))
    from ds4ci.commands.app import main as app_main

    app_main()


if __name__ == "__main__":
    main()

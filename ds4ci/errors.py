"""One error hierarchy for ds4ci.

Every error carries the exit code the CLI returns for it (docs/exit-codes.md, generated from
``ds4ci.commands.exitcodes``) and a message that tells the user what was expected, what was found
and, where possible, what to do.
"""

from __future__ import annotations

from typing import Final

EXIT_PASS: Final = 0
EXIT_FAIL: Final = 1
EXIT_USAGE: Final = 2
EXIT_ERROR: Final = 3


class Ds4ciError(Exception):
    """Base class. Anything not more specific is "no verdict could be reached" (exit 3)."""

    exit_code: int = EXIT_ERROR


class UsageError(Ds4ciError):
    """Bad flags or configuration: missing file, bad width, malformed value (exit 2)."""

    exit_code = EXIT_USAGE


class NoVerdictError(Ds4ciError):
    """The gate could not judge: pin mismatch, runner not ready, server crashed or hung (exit 3)."""

    exit_code = EXIT_ERROR


class ProtocolError(Ds4ciError):
    """A server log line or response did not have the documented shape.

    Inside the gate this becomes a *fail* of the contract clause it breaks; it only escapes
    as exit 3 when nothing could be judged at all.
    """

    exit_code = EXIT_FAIL


class ResultsError(Ds4ciError):
    """A results.json file is missing, malformed, oversized or fails the schema (exit 2)."""

    exit_code = EXIT_USAGE


class PublishError(Ds4ciError):
    """Talking to GitHub failed or was refused (exit 3)."""

    exit_code = EXIT_ERROR

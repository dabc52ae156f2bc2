"""One exception base for everything a user can cause, with the exit code the CLI returns.

Messages are one line: what is wrong, then what to do next. The CLI prints them without a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED_CHECK = 1  # e.g. ``compare --fail-if-slower`` tripped
EXIT_USAGE = 2  # bad input: the user must change something


class AiprofError(Exception):
    """An error the user can act on. ``str(err)`` is the one-line message."""

    exit_code: int = EXIT_USAGE


class TraceError(AiprofError):
    """A trace file cannot be read or understood."""


class NoTracesError(AiprofError):
    """A path holds no trace files."""


class AiprofWarning(UserWarning):
    """Something was salvaged or skipped; the result is still usable."""

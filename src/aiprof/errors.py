"""One exception base for everything a user can cause, with the exit code the CLI returns.

Messages are one line: what is wrong, then what to do next. The CLI prints them without a traceback.
"""

from __future__ import annotations

import re

_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f" + _BIDI_AND_SEPARATORS + "]")


def _visible(code: int) -> str:
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ … ␟ (␛ for ESC)
    if code == 0x7F:
        return "\u2421"  # ␡
    if code <= 0xFF:
        return f"\\x{code:02x}"  # C1 controls
    return f"\\u{code:04x}"


_VISIBLE = {c: _visible(c) for c in [*range(0x20), *range(0x7F, 0xA0), *map(ord, _BIDI_AND_SEPARATORS)]}


def printable(text: object) -> str:
    """``text`` with every control character made visible (``\\x1b`` → ``␛``, C1 as ``\\xNN``, bidi overrides
    and line separators as ``\\uNNNN``): a message that quotes a file or trace name can neither drive the
    terminal nor break its one line. ``report.escape.terminal`` is this function."""
    s = str(text)
    return s.translate(_VISIBLE) if _UNSAFE.search(s) else s

EXIT_OK = 0
EXIT_FAILED_CHECK = 1  # e.g. ``compare --fail-if-slower`` tripped
EXIT_USAGE = 2  # bad input: the user must change something
EXIT_INCONCLUSIVE = 4  # ``compare --fail-if-slower`` cannot decide: a shared machine, or a change within noise


class AiprofError(Exception):
    """An error the user can act on. ``str(err)`` is the one-line message."""

    exit_code: int = EXIT_USAGE


class TraceError(AiprofError):
    """A trace file cannot be read or understood."""


class NoTracesError(AiprofError):
    """A path holds no trace files."""


class AiprofWarning(UserWarning):
    """Something was salvaged or skipped; the result is still usable."""

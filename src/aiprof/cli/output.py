"""Every verb's ``-o``: one option (``--force``), one check before the work, one line after it.

The check is :func:`aiprof.app.check_output` (the rule: :func:`aiprof.fsutil.output_problem`): a command
never writes over a file it reads, never through a symbolic link, and replaces an existing file that is not
an aiprof output only with ``--force``. The file is then written atomically, and the verb says what it
wrote where (:func:`wrote`). A character device or a named pipe (``-o /dev/null``, ``-o /dev/stdout`` on a
terminal or a pipe) is written in place; a block device, a socket or a folder is refused, saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path


def add_force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output file that is not an aiprof output (never an input of the "
                             "command, never through a symbolic link)")


def check(outputs: Iterable[Path | None], inputs: Sequence[str | os.PathLike[str] | None], force: bool) -> None:
    """Stop with one line (exit 2) before any work when an output must not be written (see the module)."""
    from aiprof import app

    sources = [p for p in inputs if p is not None]
    chosen = [p for p in outputs if p is not None]
    for output in chosen:
        app.check_output(output, sources, force=force)
    files = [p for p in chosen if not _is_stream(p)]  # /dev/null twice is fine
    if len({str(Path(os.path.realpath(p))) for p in files}) < len(files):
        from aiprof.errors import AiprofError

        raise AiprofError("two outputs of this command are the same file; give each its own path")


def wrote(what: str, path: Path) -> None:
    """``aiprof: wrote <what> to <path>`` on stderr."""
    from aiprof.errors import printable

    print(f"aiprof: wrote {what} to {printable(str(path))}", file=sys.stderr)


def _is_stream(path: Path) -> bool:
    from aiprof.fsutil import is_stream

    try:
        return is_stream(os.stat(path))
    except OSError:
        return False

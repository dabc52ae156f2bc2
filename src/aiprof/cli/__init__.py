"""The ``aiprof`` command: argparse subcommands, one module and one class per verb.

Each verb class has ``name``, ``help``, ``prepare_parser(parser)`` and ``run(args) -> int``. Errors a user
can cause are ``AiprofError``: printed as one line on stderr, with its exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn, Protocol

from aiprof.errors import EXIT_USAGE, AiprofError, AiprofWarning, printable
from aiprof.heap import keep_freed_memory


class Command(Protocol):
    name: str
    help: str

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _commands(only: str | None = None) -> list[Command]:
    """Every verb, or only ``only`` (a command line that names its verb imports just that verb's module)."""
    # Imported here so `aiprof --help` stays fast and each verb imports only what it needs.
    commands: list[Command] = []
    if only in (None, "analyze"):
        from aiprof.cli.analyze import AnalyzeCommand

        commands.append(AnalyzeCommand())
    for module_name, class_name in _OPTIONAL_COMMANDS:
        if only is not None and module_name != only:
            continue
        try:
            module = __import__(f"aiprof.cli.{module_name}", fromlist=[class_name])
        except ModuleNotFoundError as err:
            if err.name != f"aiprof.cli.{module_name}":
                raise
            continue
        commands.append(getattr(module, class_name)())
    return commands


# Verbs that live in their own modules; a missing module simply means the verb is not built yet.
_OPTIONAL_COMMANDS: list[tuple[str, str]] = [
    ("run", "RunCommand"),
    ("demo", "DemoCommand"),
    ("compare", "CompareCommand"),
    ("roofline", "RooflineCommand"),
    ("peaks", "PeaksCommand"),
    ("export", "ExportCommand"),
    ("memory", "MemoryCommand"),
    ("whatif", "WhatIfCommand"),
]
_VERBS = {"analyze", *(module for module, _ in _OPTIONAL_COMMANDS)}


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (``aiprof: error: …``, exit 2), like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"aiprof: error: {printable(message)} (see `{self.prog} --help`)\n")


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    """The argument parser, with every verb or only ``only`` (which must be a verb's name)."""
    from aiprof import __version__

    parser = _Parser(
        prog="aiprof", description="Profile PyTorch training and inference and say what to fix first."
    )
    parser.add_argument("--version", action="version", version=f"aiprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    by_name: dict[str, Command] = {}
    for command in _commands(only):
        command.prepare_parser(sub.add_parser(command.name, help=command.help, description=command.help))
        by_name[command.name] = command
    return parser, by_name


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    print(f"aiprof: warning: {printable(message)}", file=sys.stderr)


# Commands that only read traces and write a report: once they are done, the interpreter's teardown
# (freeing every object of the loaded traces, ~50 ms for a 450k-event trace) is skipped.
_QUICK_EXIT = {"analyze", "compare", "export", "roofline", "memory"}


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _import_numpy_without_blas_threads() -> None:
    """Import NumPy with its BLAS limited to one thread, unless the user set a limit: OpenBLAS starts a
    thread per core at import, which costs ~50 ms of CPU that the decode helpers could use. The setting
    is read once, at import; the environment is restored right after (nothing leaks to children)."""
    if "numpy" in sys.modules or any(name in os.environ for name in _BLAS_THREADS):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def console_main() -> NoReturn:
    """The ``aiprof`` console script (and ``python -m aiprof``): :func:`main`, then exit.

    For the read-only commands the cyclic garbage collector is off: they allocate millions of objects
    that live until the process ends, and collections that find almost nothing cost 4-5 % of the run
    (the little cyclic garbage they make, a few MB on a million-event trace, goes with the process), and
    the C heap keeps freed blocks for reuse (:func:`aiprof.heap.keep_freed_memory`). They do no linear
    algebra, so NumPy's BLAS starts no threads."""
    argv = sys.argv[1:]
    command = next((a for a in argv if not a.startswith("-")), "")
    try:
        if command in _QUICK_EXIT:
            gc.disable()
            keep_freed_memory()
            _import_numpy_without_blas_threads()
        code = main(argv)
    except KeyboardInterrupt:  # Ctrl-C right after start, before main() took over: one line, no traceback
        code = _interrupted()
    if command in _QUICK_EXIT:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):  # a closed pipe (``aiprof analyze … | head``)
            pass
        os._exit(code)
    sys.exit(code)


def _interrupted() -> int:
    print("aiprof: interrupted", file=sys.stderr)
    return 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; returns the exit status. Ctrl-C at any point, from the first import of a
    verb's module on, is one line and 130; bad input is one line and 2; a bug is one line and 3."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        return _interrupted()


def _main(given: list[str]) -> int:
    # A verb first on the line: build only its parser (the other verbs' imports cost ~5 ms per run).
    parser, commands = build_parser(given[0] if given and given[0] in _VERBS else None)
    try:
        args = parser.parse_args(given)
    except SystemExit as done:  # --help, --version, or a usage error already said in one line
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return 2
    previous = warnings.showwarning
    warnings.showwarning = _show_warning
    warnings.simplefilter("always", AiprofWarning)
    try:
        return commands[args.command].run(args)
    except AiprofError as err:
        print(f"aiprof: error: {printable(err)}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        return 0
    except MemoryError:  # a worker's MemoryError comes back as one too
        return _usage_error(f"too large for available memory: {_inputs(args)}; try --max-events/--rank or a machine with more memory")
    except RecursionError as err:
        if "deserializ" not in str(err) and "decoding" not in str(err):
            return _internal_error(err)
        return _usage_error(f"{_inputs(args)}: JSON nested deeper than the decoder allows; not a trace or report aiprof reads")
    except Exception as err:  # a bug, not bad input: one line, and the traceback on request
        if type(err).__name__ == "BrokenProcessPool":  # a worker killed, the out-of-memory killer's way
            return _usage_error(f"a worker process was killed (out of memory?) on {_inputs(args)}; try --jobs 1, --rank or a machine with more memory")
        return _internal_error(err)
    finally:
        warnings.showwarning = previous


def _usage_error(message: str) -> int:
    print(f"aiprof: error: {printable(message)}", file=sys.stderr)
    return EXIT_USAGE


def _internal_error(err: BaseException) -> int:
    if os.environ.get("AIPROF_DEBUG"):
        raise err
    print(
        f"aiprof: internal error: {type(err).__name__}: {err} "
        "(set AIPROF_DEBUG=1 to see the traceback, and please report it)",
        file=sys.stderr,
    )
    return 3


def _inputs(args: argparse.Namespace) -> str:
    """What the command was reading, for a one-line error (its paths, shortened)."""
    items = [*(getattr(args, "paths", None) or []), *(getattr(args, name, None) for name in ("before", "after", "path"))]
    text = ", ".join(str(item) for item in items if item is not None) or f"aiprof {args.command}"
    return text if len(text) <= 200 else text[:199] + "…"

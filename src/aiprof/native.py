"""The optional C extensions, imported the one way: a module that is not built (no C compiler at
install time) or ``AIPROF_NATIVE=0`` gives None, and the caller runs its pure-Python path, which
gives the same result."""

from __future__ import annotations

import importlib
import os
from typing import Any


def optional(module: str) -> Any:
    """The extension ``module`` (e.g. ``"aiprof.trace.kineto._columnar"``), or None."""
    if os.environ.get("AIPROF_NATIVE", "").strip() == "0":
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None

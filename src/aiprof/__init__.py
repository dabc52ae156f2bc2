"""aiprof: profile PyTorch training and inference, and say what to fix first.

The analysis side (``aiprof.load`` and everything under ``aiprof.trace`` / ``aiprof.analysis``) needs
no torch. Capture (``aiprof.profile``, ``aiprof.step``, ``aiprof run``) imports torch lazily.

Everything but the error base is imported on first use: ``import aiprof`` stays cheap in every
process ``aiprof run`` injects into, and it needs neither torch nor numpy nor msgspec.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aiprof.errors import AiprofError

if TYPE_CHECKING:
    from aiprof.capture import Profile, Schedule, profile, step
    from aiprof.analysis.load import load
    from aiprof.trace import RunSet, Trace

__version__ = "0.1.0"

__all__ = ["AiprofError", "Profile", "RunSet", "Schedule", "Trace", "load", "profile", "step", "__version__"]

_LAZY = {
    "RunSet": "aiprof.trace",
    "Trace": "aiprof.trace",
    "load": "aiprof.analysis.load",
    "Profile": "aiprof.capture",
    "Schedule": "aiprof.capture",
    "profile": "aiprof.capture",
    "step": "aiprof.capture",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aiprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

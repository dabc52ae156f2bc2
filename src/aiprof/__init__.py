"""aiprof: profile PyTorch training and inference, and say what to fix first.

The analysis side (``aiprof.load`` and everything under ``aiprof.trace`` / ``aiprof.analysis``) needs
no torch. Capture (``aiprof.profile``, ``aiprof run``) imports torch lazily.
"""

from __future__ import annotations

from aiprof.errors import AiprofError
from aiprof.trace import RunSet, Trace, load

__version__ = "0.1.0"

__all__ = ["AiprofError", "RunSet", "Trace", "load", "__version__"]

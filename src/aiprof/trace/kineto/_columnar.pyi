"""Types of the native columniser (``_columnar.c``); what it returns is ``aiprof.trace.kineto.builder.Columnized``."""

from collections.abc import Callable
from typing import Any

def columnize(buffer: bytes | bytearray | memoryview, kind_of: Callable[[str], int], /) -> tuple[Any, ...] | None: ...

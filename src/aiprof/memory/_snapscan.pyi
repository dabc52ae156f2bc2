from collections.abc import Callable
from typing import Any

def scan(
    buf: Any, start: int, stop: int, limit: int, learn: Callable[[int], tuple[Any, tuple[Any, ...]] | None],
    shapes: list[Any], /,
) -> tuple[bytearray, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray,
           bytearray, bytearray]: ...

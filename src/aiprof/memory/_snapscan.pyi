from collections.abc import Callable
from typing import Any

def count(buf: Any, start: int, stop: int, limit: int, /) -> int: ...
def scan(
    buf: Any, start: int, stop: int, limit: int, learn: Callable[[int], tuple[Any, tuple[Any, ...]] | None],
    shapes: list[Any], cand: Any, end: Any, memo_inc: Any, list_off: Any, inner_pos: Any, inner_len: Any,
    stack_of: Any, shape_id: Any, ival: Any, /,
) -> tuple[bytes, bytes]: ...

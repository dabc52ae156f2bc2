"""Load a pickle that may only hold plain data: every class, global and persistent id is refused.

A pickle is a program: loading one with :func:`pickle.load` can import anything and call it (``os.system``
included). Allocator snapshots hold only dicts, lists, tuples, strings, numbers, booleans and ``None``, so
the unpickler refuses every ``GLOBAL`` / ``STACK_GLOBAL`` / ``INST`` / ``OBJ`` / extension-code lookup (they
all go through :meth:`find_class`) and every persistent id. Protocols 0 to 5 are accepted (5 only without
out-of-band buffers, which a file cannot carry).
"""

from __future__ import annotations

import gc
import io
import pickle
from typing import Any, NoReturn

from aiprof.memory.model import MemoryInputError

HIGHEST_PROTOCOL = 5


class _NoClassesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refused class {module[:60]}.{name[:60]}")

    def persistent_load(self, pid: Any) -> NoReturn:
        raise pickle.UnpicklingError("refused persistent id")


def protocol_of(data: bytes) -> int:
    """The protocol a pickle declares (``PROTO n`` first), 0-1 when it does not (protocols 0 and 1)."""
    return data[1] if len(data) >= 2 and data[0] == 0x80 else 1


def loads_plain(data: bytes, what: str) -> Any:
    """The plain-data object in ``data``; :class:`MemoryInputError` (one line, naming ``what``) otherwise."""
    if not data:
        raise MemoryInputError(f"{what}: the file is empty; re-dump the snapshot")
    proto = protocol_of(data)
    if proto > HIGHEST_PROTOCOL:
        raise MemoryInputError(
            f"{what}: pickle protocol {proto} is newer than {HIGHEST_PROTOCOL}; re-dump it with protocol ≤ 5"
        )
    collecting = gc.isenabled()
    gc.disable()  # millions of dicts and no cycles: collections during the load find nothing and cost ~half of it
    try:
        return _NoClassesUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as err:
        text = str(err)
        if text.startswith("refused"):
            raise MemoryInputError(
                f"{what}: the pickle {text}: an allocator snapshot holds only plain data, and aiprof never runs "
                "code from a pickle; dump it with torch.cuda.memory._dump_snapshot()"
            ) from None
        raise MemoryInputError(f"{what}: not a readable pickle ({text[:120]}); re-dump the snapshot") from None
    except EOFError:
        raise MemoryInputError(f"{what}: the pickle is truncated; re-copy or re-dump the snapshot") from None
    except MemoryError:
        raise MemoryInputError(f"{what}: the pickle does not fit in memory") from None
    except RecursionError:
        raise MemoryInputError(f"{what}: the pickle nests too deep to be a snapshot") from None
    except Exception as err:  # malformed opcode arguments raise ValueError, TypeError, KeyError, ...
        raise MemoryInputError(
            f"{what}: not a readable pickle ({type(err).__name__}: {str(err)[:120]}); re-dump the snapshot"
        ) from None
    finally:
        if collecting:
            gc.enable()

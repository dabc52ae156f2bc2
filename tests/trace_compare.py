"""Comparing two loaded traces exactly (for tests of alternative loading paths)."""

from __future__ import annotations

import dataclasses

import numpy as np

from aiprof.trace.model import Trace


def identical(a: Trace, b: Trace) -> None:
    """Bit for bit: columns (string ids included), strings, side tables, names, warnings."""
    for field in dataclasses.fields(a.columns):
        x, y = getattr(a.columns, field.name), getattr(b.columns, field.name)
        assert x.dtype == y.dtype, field.name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), field.name
    assert a.strings == b.strings
    for field in dataclasses.fields(a.flows):
        assert np.array_equal(getattr(a.flows, field.name), getattr(b.flows, field.name)), field.name
    for store in ("op_args", "comm_args_raw"):
        x, y = getattr(a, store), getattr(b, store)
        assert np.array_equal(x.rows, y.rows) and np.array_equal(x.keys, y.keys) and x.data == y.data, store
    assert a.stacks == b.stacks
    assert a.process_names == b.process_names and a.thread_names == b.thread_names
    assert a.event_count == b.event_count and a.warnings == b.warnings
    assert a.devices == b.devices and a.metadata == b.metadata and a.base_time_ns == b.base_time_ns

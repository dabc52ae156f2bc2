"""The native columniser against the pure-Python path, on the same text.

Its contract (``aiprof/trace/kineto/_columnar.c``): build exactly what the pure path builds, or hand the run
back (``None``) without changing anything. Every test here feeds one JSON array of events to a builder
through each path and compares the traces they finish into, bit for bit (string ids, side tables and
warnings included), or the errors they raise."""

from __future__ import annotations

import json
import os
import random
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_compare import identical

from aiprof.errors import TraceError
from aiprof.trace.kineto import builder as column_builder
from aiprof.trace.kineto.builder import Builder, RawTrace
from aiprof.trace.model import Trace
from aiprof.trace.kineto.schema import TraceFile

NATIVE = column_builder._native
needs_native = pytest.mark.skipif(NATIVE is None, reason="the native columniser is not built (or AIPROF_NATIVE=0)")


class Lit(str):
    """A JSON token written as it is (``1e400``, ``-0``, ``"\\ud800"``): what json.dumps cannot write."""


def dump(value: Any, indent: int | None, ascii_only: bool, level: int = 0) -> str:
    """JSON text, compact (indent None) or pretty-printed, with Lit tokens kept verbatim."""
    if isinstance(value, Lit):
        return str(value)
    if isinstance(value, (dict, list)):
        items = (
            [f"{dump(k, None, ascii_only)}: {dump(v, indent, ascii_only, level + 1)}" for k, v in value.items()]
            if isinstance(value, dict)
            else [dump(v, indent, ascii_only, level + 1) for v in value]
        )
        open_, close = ("{", "}") if isinstance(value, dict) else ("[", "]")
        if not items:
            return open_ + close
        if indent is None:
            return open_ + ", ".join(items) + close
        pad, inner = " " * (indent * level), " " * (indent * (level + 1))
        return open_ + "\n" + ",\n".join(inner + item for item in items) + "\n" + pad + close
    return json.dumps(value, ensure_ascii=ascii_only)


def build(blob: bytes, native: Any) -> tuple[Trace | None, str]:
    """Feed ``blob`` (a JSON array) to a fresh builder on one path; the trace, or the error it raised."""
    saved = column_builder._native
    column_builder._native = native
    try:
        builder = Builder(RawTrace([], TraceFile(), []), Path("t.json"))
        try:
            count = builder.feed_array(blob)
        except msgspec.DecodeError as err:
            return None, f"DecodeError: {err}"
        try:
            return builder.finish(0, "file order", count), ""
        except TraceError as err:
            return None, f"TraceError: {err}"
    finally:
        column_builder._native = saved


def same(blob: bytes) -> bool:
    """Both paths agree on ``blob``; True when the native path read it itself."""
    pure, pure_error = build(blob, None)
    ran = NATIVE.columnize(blob, column_builder._kind_code) is not None
    native, native_error = build(blob, NATIVE)
    assert native_error == pure_error
    if pure is not None:
        assert native is not None
        identical(native, pure)
    return ran


def events_text(events: list[Any], indent: int | None = 2, ascii_only: bool = False) -> bytes:
    return dump(events, indent, ascii_only).encode()


# ---------------------------------------------------------------------------------------------------
# Random events: plausible Kineto events, with every field sometimes missing, mistyped or extreme
# ---------------------------------------------------------------------------------------------------
INTS = st.one_of(
    st.integers(-5, 70_000),
    st.sampled_from([0, -1, 2**31, 2**53 + 1, 2**62, 2**62 + 7, -(2**62), 2**63 - 1, -(2**63)]),
    st.sampled_from([Lit("-0"), Lit("9223372036854775808"), Lit("18446744073709551616"), Lit("-9223372036854775809")]),
)
FLOATS = st.one_of(
    st.floats(-1e7, 1e13, allow_nan=False).map(lambda x: round(x, 3)),
    st.sampled_from([Lit("1e3"), Lit("1.5E-2"), Lit("-0.0"), Lit("12345678901234567.125"), Lit("0.0000001")]),
)
ODD = st.sampled_from([None, True, "7", "x", [], {}, [1, 2], Lit("1e400"), Lit('"\\u00e9t\\u00e9"')])
NUMBERS = st.one_of(INTS, FLOATS)
ANY_VALUE = st.one_of(INTS, FLOATS, ODD, st.text(max_size=4))
NAMES = st.sampled_from([
    "aten::mm", "aten::add_", "ProfilerStep#3", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "Optimizer.step#SGD.step", "[memory]", "record_param_comms", "process_name", "thread_name", "process_labels",
    "cudaLaunchKernel", "void gemm<float>(\"q\")", "k\u00e9rnel \u2603 \U0001f600", "", "nccl:all_reduce", "Memcpy HtoD",
])  # fmt: skip
CATS = st.sampled_from([
    "cpu_op", "Operator", "kernel", "Kernel", "cuda_runtime", "Runtime", "cuda_driver", "gpu_memcpy", "gpu_memset",
    "python_function", "user_annotation", "gpu_user_annotation", "cuda_sync", "ac2g", "fwdbwd", "async", "Trace",
    "overhead", "", "Weird",
])  # fmt: skip
PIDS = st.one_of(  # ints beyond int64 are left to the pure path: they come with the noisy events
    st.integers(-5, 70_000),
    st.sampled_from([0, -1, 2**62, 2**62 + 7, -(2**62), 2**63 - 1, -(2**63), Lit("-0")]),
    st.sampled_from(["Spans", "Traces", "stream 7", "456", "+5", " 12 ", "-3", "x9"]),
)
DIMS = st.one_of(
    st.lists(st.integers(0, 4096), max_size=3),
    st.sampled_from([None, [], [1.5, 2], [0, Lit("18446744073709551616")], [Lit("9223372036854775808"), 2], [-1, 3],
                     [2**40, 2**40], [True], "128", [[1]], [1, 2, 3, 4], [2**31, 1], [0, 2**31 - 1], [7]]),
)  # fmt: skip
SHAPES = st.one_of(
    st.lists(st.lists(st.integers(0, 64), max_size=3), max_size=3),
    st.sampled_from([None, [], "x", [["a b"]], {"k": [1, 2]}]),
)


def arg_values(key: str) -> st.SearchStrategy[Any]:
    typed = {
        "grid": DIMS, "block": DIMS,
        "blocks per SM": NUMBERS, "warps per SM": NUMBERS, "est. achieved occupancy %": NUMBERS,
        "Call stack": st.sampled_from(["a.py(1): f;b.py(2): g", "", None, 3]),
        "Collective name": st.sampled_from(["allreduce", "", None, 5]),
        "Input Dims": SHAPES, "Input dims": SHAPES, "Input type": SHAPES, "Concrete Inputs": SHAPES,
        "Input Strides": SHAPES,
    }  # fmt: skip
    return st.one_of(typed.get(key, INTS), ANY_VALUE) if key in typed else st.one_of(INTS, INTS, ANY_VALUE)


ARG_KEYS = [
    "External id", "external id", "correlation", "Sequence number", "Fwd thread id", "Python id",
    "Python parent id", "Python module id", "Call stack", "Collective name", "Input Dims", "Input dims",
    "Input type", "Concrete Inputs", "Input Strides", "device", "stream", "bytes", "grid", "block",
    "registers per thread", "shared memory", "blocks per SM", "warps per SM", "est. achieved occupancy %",
    "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id", "Addr", "name", "labels",
    "Ev Idx", "Trace name",
]  # fmt: skip


@st.composite
def args_objects(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from([None, [], "x", 3]))
    keys = draw(st.lists(st.sampled_from(ARG_KEYS), max_size=7, unique=True))
    return {key: draw(arg_values(key)) for key in keys}


@st.composite
def events(draw: st.DrawFn, noisy: bool = True) -> Any:
    """An event; ``noisy``: sometimes not an object, or with an event field of the wrong type (runs the
    native path hands back), else only its args are odd."""
    if noisy and draw(st.integers(0, 60)) == 0:
        return draw(st.sampled_from([None, 3, "x", []]))
    event: dict[str, Any] = {}
    fields: list[tuple[str, st.SearchStrategy[Any]]] = [
        ("ph", st.sampled_from(["X", "X", "X", "X", "i", "I", "M", "s", "f", "t", "B", "C", "Xs"])),
        ("cat", CATS), ("name", NAMES), ("pid", PIDS), ("tid", PIDS), ("ts", FLOATS), ("dur", FLOATS),
        ("id", st.one_of(st.integers(0, 50), st.sampled_from([None, "flow7"] + [Lit("2.5")] * noisy))),
        ("args", args_objects()),
    ]  # fmt: skip
    for key, values in fields:
        if draw(st.integers(0, 12)) == 0:
            continue  # missing
        event[key] = draw(st.one_of(values, ANY_VALUE) if noisy and draw(st.integers(0, 25)) == 0 else values)
    if draw(st.booleans()):
        order = list(event)
        random.Random(draw(st.integers(0, 1000))).shuffle(order)
        event = {key: event[key] for key in order}  # args before ph/cat/name, say
    return event


RUNS = st.one_of(st.lists(events(noisy=False), max_size=14), st.lists(events(), max_size=14))


@needs_native
@settings(max_examples=400, deadline=None)
@given(RUNS, st.sampled_from([None, 1, 2]), st.booleans())
def test_random_events_build_the_same_trace(items: list[Any], indent: int | None, ascii_only: bool) -> None:
    same(events_text(items, indent, ascii_only))


# ---------------------------------------------------------------------------------------------------
# Cases the contract names, each checked both ways: read natively (and the same), or handed back
# ---------------------------------------------------------------------------------------------------
def span(**fields: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.5, "dur": 2.25}
    event.update(fields)
    return event


META = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}


@needs_native
@pytest.mark.parametrize(
    "items",
    [
        [span(args={"External id": 7, "Python parent id": None, "Sequence number": "3"})],  # null / wrong type: absent
        [span(args={"correlation": Lit("9223372036854775808"), "Fwd thread id": 1.5})],  # out of int64 / a float: -1
        [span(cat="kernel", args={"grid": [1.5, 2], "block": [0, Lit("18446744073709551616")], "stream": 7})],
        [span(cat="kernel", args={"grid": [2**40, 2**40], "blocks per SM": 3, "warps per SM": None})],
        [span(pid="Spans", tid="PyTorch Profiler", cat="Trace"), span(tid="stream 7"), span(pid="456", tid=" 12 ")],
        [span(pid="+5"), span(pid=5)],  # "+5" is a number to numpy alone, a string id beside another string
        [META, dict(META, args={"name": "second"}), dict(META, pid="1"), dict(META, name="thread_name", tid=3)],
        [{"ph": "s", "id": 4, "cat": "ac2g", "pid": 1, "tid": 2, "ts": 3}, {"ph": "f", "id": "x", "cat": "fwdbwd", "pid": "a", "tid": 2, "ts": 4}],
        [span(name="ProfilerStep#1"), span(ph="i", name="[memory]", args={"Bytes": 8, "Device Type": 1, "Device Id": 0})],
        [span(name="record_param_comms"), span(args={"Collective name": "allreduce"}), span(cat="kernel", args={"Collective name": "x"})],
        [span(args={"Call stack": "a.py(1): f"}), span(args={"Call stack": ""})],
        [span(name='q"uote\\\n\u00e9\U0001f600'), span(name=Lit('"\\u0041\\u00e9\\ud83d\\ude00"'))],
        [{"args": {"External id": 3}, "dur": 1, "ts": 2, "tid": 1, "pid": 1, "name": "aten::mm", "cat": "cpu_op", "ph": "X"}],
        [span(args={"Input Dims": [[1, 2], []], "Input type": ["float", ""], "External id": 1}), span(args={"Input dims": [[3]]})],
        [span(args={"Input Dims": [], "External id": 0.0})],  # a mistyped key must not lose the op's shapes
        [span(ts=-5.0, dur=-1.0), span(ph="i", dur=4.0)],  # a negative duration, an instant's duration
        [span(), span(cat="Weird"), {"ph": "B", "name": "x"}, span(ph="C")],
        [span(), {}],
    ],
)
def test_edge_cases_are_read_natively_and_identically(items: list[Any]) -> None:
    for indent in (None, 2):
        assert same(events_text(items, indent)), "the native path handed the run back"


@needs_native
@pytest.mark.parametrize(
    "text",
    [
        b'[{"ph": "X", "ts": null, "pid": 1}]',  # a mistyped event field: the pure path skips the event
        b'[{"ph": "X", "ts": 1, "pid": 1.5}]',
        b'[{"ph": "X", "ts": 1e400}]',  # out of a double's range: msgspec rejects the whole run
        b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"correlation": 1e400, "Sequence number": 4}}]',
        b'[{"ph": "X", "ts": 1, "args": {"x": "\\ud800"}}]',  # a lone surrogate, even in a skipped value
        b'[{"ph": "X", "ts": 1, "name": "\xff"}]',  # not UTF-8
        b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Call stack": "\xff"}}]',
        b'[{"ph": "X", "ts": 1}, 3]',  # not an object
        b'[{"ph": "X", "cat": "kernel", "ts": 1, "args": null}]',
        b'[{"ph": "X", "ts": 1, "args": {"x": ' + b"[" * 70 + b"]" * 70 + b"}}]",
        b'[{"ph": "X", "ts": 5, "dur": NaN}]',
        b'[{"ph": "X", "ts": 5}',  # not a complete array (a cut inside an event)
        b'[{"ph": "X", "ts": 5}] x',
        b'[{"ph": "X", "ts": 01}]',
        b'[{"ph": "X", "ts": NaN}]',
        b'[{"ph": "X", "ts": 5, "name": "a\x01"}]',
    ],
)
def test_what_the_native_path_hands_back(text: bytes) -> None:
    assert NATIVE.columnize(text, column_builder._kind_code) is None
    assert not same(text)


@needs_native
def test_mutated_text_is_read_identically_or_handed_back() -> None:
    """Cut, overwritten, spliced text (what a bad cut or a corrupt file gives): never a crash, and the
    same result as the pure path (deterministic: a fixed seed; also run under ASan/UBSan, see
    docs/architecture.md)."""
    rng = random.Random(20261129)
    seeds = [
        events_text([span(args={"External id": 3, "Input Dims": [[1, 2]], "Call stack": "a.py(1): f"}), META], 2),
        events_text([span(cat="kernel", pid=0, tid="stream 7", args={"grid": [2, 1, 1], "blocks per SM": 0.5})], None),
        events_text([{"ph": "s", "id": 4, "cat": "ac2g", "pid": 1, "tid": 2, "ts": 3}, span(name="k\u00e9 \"q\"")], 1),
    ]
    splices = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"\x00", b"\xff", b"\xc3", b"e", b"-", b"9", b"\\ud800", b"1e400"]
    for _ in range(1500):
        text = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            match rng.randrange(4):
                case 0:
                    del text[at:]
                case 1 if at < len(text):
                    text[at] = rng.randrange(256)
                case 2:
                    text[at:at] = rng.choice(splices)
                case _:
                    del text[at : at + rng.randint(1, 20)]
        same(bytes(text))


@needs_native
def test_pretty_printed_shapes_are_minified_as_the_pure_path_does() -> None:
    compact = [span(args={"Input Dims": [[1, 2]], "External id": i}) for i in range(20)]
    # a newline in the first 16 shapes minifies them all; only after them, none
    for items in (compact, compact[:18] + [span(args={"Input Dims": Lit("[[1,\n 2]]")})]):
        for indent in (None, 2):
            assert same(events_text(items, indent))


@needs_native
def test_a_bad_time_hands_the_run_back_unchanged() -> None:
    text = events_text([span(name="first"), span(ts=Lit("1e17"))])
    builder = Builder(RawTrace([], TraceFile(), []), Path("t.json"))
    builder.feed_array(text)
    assert builder.native_fallbacks == 1 and builder.bad_time == 1 and builder.strings == {"cpu_op": 0, "first": 1}
    assert same(text) is True  # columnize read it; the builder then chose the pure path


def test_the_extension_is_built_where_a_compiler_is() -> None:
    """``pip install`` builds it (setup.py, optional); without a C compiler the loader runs without it."""
    if os.environ.get("AIPROF_NATIVE", "").strip() == "0":
        pytest.skip("AIPROF_NATIVE=0")
    if not (shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0]) or shutil.which("cc")):
        pytest.skip("no C compiler here")
    assert column_builder.native_enabled()

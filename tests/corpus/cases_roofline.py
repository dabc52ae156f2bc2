"""Roofline classes: the numbers behind the roofline section and the rules that read it hold on traces from
other eras and on calls that do no work (legacy shapes without dtypes, expanded inputs, eval-mode dropout,
a ``to`` that converts nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from corpus import Case, case
from kineto_builder import TraceBuilder

F = "float"
BIG = [1024, 1024]


def _roof_rows(run: Any, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = msgspec.to_builtins(run.ranks[0].sections["roofline"].rows)  # as the JSON holds them
    return [r for r in rows if r["name"] == name]


def _legacy_untyped(tmp: Path) -> Path:
    """A torch 1.8-era capture (legacy ``Input dims``, no ``Input type``) of a V100 kept busy by FP32
    GEMMs back to back: the roofline models them as fp32 (that era's default) and says it assumed so."""
    b = TraceBuilder(schema="legacy", device_name="Tesla V100-SXM2-16GB")
    for i in range(6):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 5, dur=10, args={"Input dims": [[2048, 2048], [2048, 2048]]})
        b.launch(op, kernel="volta_sgemm_128x64_nn", kernel_ts=t0 + 12, kernel_dur=985, grid=(160, 1, 1))
    return b.write(tmp / "legacy.json")


def _check_legacy(run: Any, findings: list[dict[str, Any]]) -> None:
    mm = _roof_rows(run, "aten::mm")
    assert mm and all(r["family"] == "gemm" and r["dtype"] == "fp32" and r["dtype_assumed"] for r in mm)
    notes = run.ranks[0].sections["roofline"].notes
    assert any("without dtypes" in n for n in notes), notes


def _expanded_input(tmp: Path) -> Path:
    """CPU inference: ``x * bias.expand_as(x)`` every step. The expanded bias has stride 0 along the rows:
    the multiply reads 4 MB of x and 4 KB of bias, not 8 MB."""
    b = TraceBuilder()
    for i in range(6):
        t0 = i * 2000
        b.step(i, ts=t0, dur=2000)
        b.cpu_op("aten::mm", ts=t0 + 10, dur=1400, shapes=[BIG, BIG], dtypes=[F, F])
        b.cpu_op("aten::mul", ts=t0 + 1420, dur=560, shapes=[BIG, BIG], dtypes=[F, F],
                 args={"Input Strides": [[1024, 1], [0, 1]]})
    return b.write(tmp / "expanded.json")


def _check_expanded(run: Any, findings: list[dict[str, Any]]) -> None:
    (mul,) = _roof_rows(run, "aten::mul")
    assert mul["expanded_inputs"] and mul["bytes_read"] == 6 * (1024 * 1024 + 1024) * 4, mul


def _eval_dropout(tmp: Path) -> Path:
    """CPU inference of a model left with dropout layers (``model.eval()``): each ``aten::dropout`` with
    ``train=False`` returns its input in a microsecond. Between them, an add and a mul that do not form
    a chain of three: fusing them would save little; the dropouts are not elementwise work to fuse."""
    b = TraceBuilder()
    drop = {"shapes": [BIG, [], []], "dtypes": [F, "Scalar", "Scalar"], "concrete": ["", "0.1", "False"]}
    for i in range(6):
        t0 = i * 2000
        b.step(i, ts=t0, dur=2000)
        b.cpu_op("aten::mm", ts=t0 + 10, dur=1000, shapes=[BIG, BIG], dtypes=[F, F])
        b.cpu_op("aten::add", ts=t0 + 1020, dur=450, shapes=[BIG, BIG, []], dtypes=[F, F, "Scalar"],
                 concrete=["", "", "1"])
        b.cpu_op("aten::dropout", ts=t0 + 1475, dur=1, **drop)
        b.cpu_op("aten::mul", ts=t0 + 1480, dur=450, shapes=[BIG, BIG], dtypes=[F, F])
        b.cpu_op("aten::dropout", ts=t0 + 1935, dur=1, **drop)
    return b.write(tmp / "eval_dropout.json")


def _check_dropout(run: Any, findings: list[dict[str, Any]]) -> None:
    drops = _roof_rows(run, "aten::dropout")
    assert drops and all(r["bound"] == "no-op" and not r["drawn"] and r["bytes_read"] == 0 for r in drops)


def _noop_to(tmp: Path) -> Path:
    """A 2-core CPU run that calls ``x.to(torch.float32)`` on an fp32 tensor every step: torch returns x
    (no child ``_to_copy``/``copy_``), 1 µs. Costed as a 4 MB copy it would be a 8 TB/s point."""
    b = TraceBuilder()
    for i in range(6):
        t0 = i * 2000
        b.step(i, ts=t0, dur=2000)
        b.cpu_op("aten::to", ts=t0 + 5, dur=1, shapes=[BIG, [], [], [], []],
                 dtypes=[F, "Scalar", "Scalar", "Scalar", ""], concrete=["", "6", "False", "False", ""])
        b.cpu_op("aten::mm", ts=t0 + 10, dur=1980, shapes=[BIG, BIG], dtypes=[F, F])
    return b.write(tmp / "noop_to.json")


def _check_noop_to(run: Any, findings: list[dict[str, Any]]) -> None:
    (to,) = _roof_rows(run, "aten::to")
    assert to["bound"] == "no-op" and not to["drawn"] and to["saving_ns"] == 0, to


CASES: list[Case] = [
    case("legacy_untyped_shapes_costed_fp32", _legacy_untyped, "precision",
         "a V100 kept busy by FP32 GEMMs (volta_sgemm: CUDA cores, not tensor cores) in a 2021 trace without "
         "dtypes: nothing is idle, the GEMMs' precision is what to change; the roofline models them as fp32 "
         "and says the dtype is an assumption", absent={"launch_bound", "host_bound"}, check=_check_legacy),
    case("expanded_input_read_once", _expanded_input, None,
         "a broadcast multiply reads its expanded operand once: ideal bytes are x plus one bias row",
         check=_check_expanded),
    case("eval_dropout_is_not_work", _eval_dropout, None,
         "dropout in eval mode returns its input: it is neither work on the roofline nor a link in a chain of "
         "elementwise ops to fuse", absent={"fusion_opportunity"}, check=_check_dropout),
    case("noop_to_not_drawn", _noop_to, None,
         "a no-op .to() of an fp32 tensor to fp32 copies nothing: no roofline point at an impossible bandwidth",
         absent={"fusion_opportunity"}, check=_check_noop_to),
]

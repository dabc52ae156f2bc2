"""Memory classes: a live set that grows step over step is a leak, found by default when the trace has
``[memory]`` events (no ``--memory``), and never an "activations dominate" that checkpointing would fix; a
real CPU run (``scripts/leak_train.py``: a validation forward without ``no_grad`` summed as a tensor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import ANY, Case, case, run_script
from kineto_builder import TraceBuilder

MiB = 1 << 20


def _leak(tmp: Path, *, leak: bool) -> Path:
    """6 CPU steps of 10 ms: a forward (aten::addmm) makes a 3 MiB activation freed in the backward
    (aten::mm), and, with ``leak``, aten::add keeps a 2 MiB block every step (never freed)."""
    b = TraceBuilder()
    total, addr = 0, 0x7F00_0000_0000
    t = 0.0
    for s in range(6):
        b.step(s, ts=t, dur=10_000)
        b.cpu_op("aten::addmm", ts=t + 10, dur=3_990, shapes=[[256], [256, 256], [256, 256], [], []],
                 dtypes=["float"] * 3 + ["Scalar"] * 2)
        total += 3 * MiB
        act = addr + s * 0x100_0000
        b.memory(t + 20, 3 * MiB, total_allocated=total, addr=act)
        b.cpu_op("aten::add", ts=t + 4_000, dur=1_990, shapes=[[256, 256], [256, 256]], dtypes=["float", "float"])
        if leak:
            total += 2 * MiB
            b.memory(t + 4_010, 2 * MiB, total_allocated=total, addr=act + 0x80_0000)
        b.cpu_op("aten::mm", ts=t + 6_000, dur=3_990, shapes=[[256, 256], [256, 256]], dtypes=["float", "float"])
        total -= 3 * MiB
        b.memory(t + 9_980, -3 * MiB, total_allocated=total, addr=act)
        t += 10_010
    return b.write(tmp / ("leak.json" if leak else "no_leak.json"))


def _check_leak(run: Any, findings: list[dict[str, Any]]) -> None:
    memory = [f for f in findings if f["id"].startswith("mem_")]
    assert memory and memory[0]["id"] == "mem_leak", [f["id"] for f in memory]
    ev = memory[0]["evidence"]
    assert ev["growth_bytes_per_step"] == 2 * MiB and "aten::add" in memory[0]["title"]
    assert "checkpoint" not in " ".join(f["fix"] for f in findings)


def _real(tmp: Path, *args: str) -> Path:
    return run_script("leak_train.py", tmp / "run", *args) / "trace.json"


def _check_real(run: Any, findings: list[dict[str, Any]]) -> None:
    memory = [f for f in findings if f["id"].startswith("mem_")]
    assert memory and memory[0]["id"] == "mem_leak", [f["id"] for f in memory]
    # the validation forward's graph: its ReLU output (512 x 1024 fp32, 2 MiB) and the addmm outputs it saves
    growth = memory[0]["evidence"]["growth_bytes_per_step"]
    assert 2 * MiB <= growth <= 4 * MiB, growth


CASES: list[Case] = [
    case("memory_leak_per_step", lambda tmp: _leak(tmp, leak=True), "mem_leak",
         "a block kept every step: memory grows 2 MiB per step; the leak, not the activations (checkpointing "
         "cannot free it)", absent={"mem_activation_dominant"}, check=_check_leak),
    case("memory_steady", lambda tmp: _leak(tmp, leak=False), ANY,
         "the same steps without the kept block: memory returns to where it was every step", absent={"mem_leak"}),
    case("real_cpu_leak_train", _real, ANY,
         "a real CPU loop with a validation forward outside no_grad summed as a tensor: found by default "
         "(no --memory) as a leak of its graph, before any activation advice",
         present={"mem_leak"}, absent={"mem_activation_dominant"}, check=_check_real, real=True),
    case("real_cpu_leak_fixed", lambda tmp: _real(tmp, "fixed"), ANY,
         "its twin with no_grad and loss.item(): no leak", absent={"mem_leak"}, real=True),
]

"""Record real GPU traces of aiprof's workloads on one CUDA device, in one short run (a lent H200, ~5 min).

    python bench/gpu_record.py --out DIR              # every case; DIR gets the traces and expected.json
    python bench/gpu_record.py --out DIR --only compile_recompile,generate

Each case runs in its own subprocess with a time limit; one that fails is logged in ``expected.json`` and the
rest go on. What each case records (all Kineto traces are gzip'd Chrome traces):

- ``planted-NAME`` / ``planted-NAME-fixed``: every planted workload of ``aiprof.workloads`` on the GPU, the
  planted variant and the fixed one, profiled (3 warm-up + 5 active steps, shapes and memory), and the median
  step time of each variant without the profiler (``measure_saving_ns``: alternating blocks): the measured
  saving that aiprof's estimate is checked against.
- ``compile_recompile``: ``torch.compile(dynamic=False)`` fed a new batch size every step (a recompile per
  step); ``compile_recompile-fixed``: the same shapes with ``dynamic=True`` (one compile).
- ``compile_graph_break``: a ``.item()`` branch inside the compiled ``forward`` (a graph break every step).
- ``compile_clean``: a compiled model, one shape: the first step compiles, the rest run compiled.
- ``reduce_overhead``: ``mode="reduce-overhead"`` (CUDA graph trees) on a launch-bound model, one shape;
  ``reduce_overhead-rerecord``: the same fed a new shape every step (graphs re-recorded, never replayed).
- ``cuda_graph_manual``: a ``torch.cuda.CUDAGraph`` captured inside the profiled window, then replayed.
- ``generate`` and ``train``: ``aiprof run`` end to end on the GPU (``examples/generate_tiny.py --device
  cuda``, ``examples/train_tiny.py``): whole run directories, NVML telemetry included.
- ``memory``: ``bench/memory_gpu.py --out DIR/memory`` (its own checks; see that script).

The compile cases profile every step from the first (the cold compile is in step 0); ``with_stack`` is on for
them so a graph break can be placed at its source line. Shapes are small: the traces stay a few MB each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLANTED_STEPS, PLANTED_WARMUP = 5, 3
# GPU_RECORD_LEAN=1: no shapes, memory or stacks, fewer steps: a compile case's trace holds every op Dynamo and
# Inductor run while compiling (tens of MB per compile with stacks), too big for a fixture otherwise.
LEAN = os.environ.get("GPU_RECORD_LEAN") == "1"
COMPILE_STEPS = 4 if LEAN else 6


def _gzip(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return out


def _profile_steps(out: Path, step: Callable[[int], None], steps: int, *, warmup: int = 0, stack: bool = False) -> Path:
    """Profile ``warmup + steps`` calls of ``step(i)``, each one profiler step; the trace of the active ones."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    raw = out.with_suffix("")  # NAME.pt.trace.json
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
        record_shapes=not LEAN,
        profile_memory=not LEAN,
        with_stack=stack and (warmup > 0 or not LEAN),  # no compile in the window: stacks stay small
    ) as prof:
        for i in range(warmup + steps):
            step(i)
            prof.step()
    torch.cuda.synchronize()
    return _gzip(raw)


def _mlp(torch: Any, width: int, depth: int) -> Any:
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()


def _train(torch: Any, model: Any, opt: Any, x: Any, y: Any) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# --- the compile and graph cases --------------------------------------------------------------------------

def case_compile_recompile(out: Path, fixed: bool) -> dict[str, Any]:
    import torch

    torch._dynamo.config.cache_size_limit = 64  # keep recompiling instead of falling back to eager
    model = _mlp(torch, 512, 3)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, dynamic=True if fixed else False)
    batches = [64 + 16 * i for i in range(COMPILE_STEPS)]

    def step(i: int) -> None:
        b = batches[i]
        x = torch.randn(b, 512, device="cuda")
        y = torch.randint(0, 10, (b,), device="cuda")
        _train(torch, compiled, opt, x, y)

    path = _profile_steps(out / f"compile_recompile{'-fixed' if fixed else ''}.pt.trace.json.gz", step, len(batches), stack=True)
    return {"trace": path.name, "batches": batches, "dynamic": fixed}


class _Branchy:
    """A model whose forward reads a tensor's value in Python: Dynamo breaks the graph there."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.a = _mlp(torch, 512, 2)
        self.b = _mlp(torch, 10, 1)

    def parameters(self) -> Any:
        return [*self.a.parameters(), *self.b.parameters()]

    def forward(self, x: Any) -> Any:
        h = self.a(x)
        if h.sum().item() > 0:  # the graph break
            h = h * 2
        return self.b(h)


def case_compile_graph_break(out: Path) -> dict[str, Any]:
    import torch

    m = _Branchy(torch)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    fwd = torch.compile(m.forward)

    def step(i: int) -> None:
        x = torch.randn(256, 512, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        loss = torch.nn.functional.cross_entropy(fwd(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # lean: the compiling first step is a profiler warm-up step, so the steady steps keep their stacks
    path = _profile_steps(out / "compile_graph_break.pt.trace.json.gz", step, COMPILE_STEPS, warmup=1 if LEAN else 0, stack=True)
    return {"trace": path.name}


def case_compile_clean(out: Path) -> dict[str, Any]:
    import torch

    model = _mlp(torch, 1024, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model)
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    path = _profile_steps(out / "compile_clean.pt.trace.json.gz", lambda i: _train(torch, compiled, opt, x, y), COMPILE_STEPS, stack=True)
    return {"trace": path.name}


def case_reduce_overhead(out: Path, rerecord: bool) -> dict[str, Any]:
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(24)]).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    torch._dynamo.config.cache_size_limit = 64
    sizes = [8 + 4 * i for i in range(10)] if rerecord else [16] * 10

    def step(i: int) -> None:
        with torch.no_grad():
            x = torch.randn(sizes[i], 64, device="cuda")
            torch.compiler.cudagraph_mark_step_begin()
            compiled(x).sum()

    name = f"reduce_overhead{'-rerecord' if rerecord else ''}.pt.trace.json.gz"
    path = _profile_steps(out / name, step, len(sizes))
    return {"trace": path.name, "sizes": sizes}


def case_cuda_graph_manual(out: Path) -> dict[str, Any]:
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(16)]).cuda().eval()
    static_x = torch.randn(32, 128, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):  # warm-up on a side stream, as the CUDA graphs docs do
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()

    def step(i: int) -> None:
        static_x.copy_(torch.randn(32, 128, device="cuda"))
        if i == 0:
            with torch.cuda.graph(graph), torch.no_grad():
                model(static_x)
        graph.replay()

    path = _profile_steps(out / "cuda_graph_manual.pt.trace.json.gz", step, 8)
    return {"trace": path.name, "captured_in_step": 0, "replays": 8}


# --- the planted workloads --------------------------------------------------------------------------------

def case_planted(out: Path, name: str) -> dict[str, Any]:
    from aiprof.workloads import WORKLOADS
    from aiprof.workloads.base import measure_saving_ns, profile_workload

    result: dict[str, Any] = {"finding_id": WORKLOADS[name].finding_id, "traces": []}
    for fixed in (False, True):
        raw = profile_workload(name, fixed, out, steps=PLANTED_STEPS, warmup=PLANTED_WARMUP, device="cuda")
        final = out / f"planted-{raw.name}"
        raw.rename(final)
        result["traces"].append(_gzip(final).name)
    before, after = measure_saving_ns(name, steps=15, warmup=3, rounds=3, device="cuda")
    result.update(step_ns_planted=before, step_ns_fixed=after, measured_saving_ns=before - after)
    return result


# --- aiprof run end to end --------------------------------------------------------------------------------

def _aiprof_run(out: Path, name: str, argv: list[str], extra: list[str]) -> dict[str, Any]:
    run_dir = out / f"run-{name}"
    cmd = [sys.executable, "-m", "aiprof", "run", "--out", str(run_dir), *extra, "--", sys.executable, *argv]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    (out / f"run-{name}.log").write_text(proc.stdout[-20000:] + "\n--- stderr ---\n" + proc.stderr[-20000:])
    if proc.returncode != 0:
        raise RuntimeError(f"aiprof run exited {proc.returncode}: {proc.stderr[-1500:]}")
    return {"run_dir": run_dir.name}


def case_generate(out: Path) -> dict[str, Any]:
    stamps = out / "generate-stamps.jsonl"
    return {**_aiprof_run(out, "generate", ["examples/generate_tiny.py", "--device", "cuda", "--requests", "4",
                                             "--new-tokens", "16", "--stamps", str(stamps)], ["--no-summary"]),
            "stamps": stamps.name}


def case_train(out: Path) -> dict[str, Any]:
    return _aiprof_run(out, "train", ["examples/train_tiny.py", "--steps", "30", "--num-workers", "2"], ["--no-summary"])


def case_memory(out: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "bench/memory_gpu.py", "--out", str(out / "memory")], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, check=False)
    (out / "memory.log").write_text(proc.stdout[-20000:] + "\n--- stderr ---\n" + proc.stderr[-20000:])
    return {"rc": proc.returncode}


def _cases() -> dict[str, Callable[[Path], dict[str, Any]]]:
    from aiprof.workloads import WORKLOADS

    cases: dict[str, Callable[[Path], dict[str, Any]]] = {
        "compile_recompile": lambda o: case_compile_recompile(o, False),
        "compile_recompile-fixed": lambda o: case_compile_recompile(o, True),
        "compile_graph_break": case_compile_graph_break,
        "compile_clean": case_compile_clean,
        "reduce_overhead": lambda o: case_reduce_overhead(o, False),
        "reduce_overhead-rerecord": lambda o: case_reduce_overhead(o, True),
        "cuda_graph_manual": case_cuda_graph_manual,
    }
    for name in WORKLOADS:
        cases[f"planted-{name}"] = lambda o, n=name: case_planted(o, n)
    cases.update(generate=case_generate, train=case_train, memory=case_memory)
    return cases


# Cases that time nothing run several at a time (their compile work is CPU-bound); the rest one by one.
PARALLEL_PREFIXES = ("compile_", "reduce_overhead", "cuda_graph")


def _child(case: str, out: Path) -> None:
    result = _cases()[case](out)
    print(json.dumps(result))


def _launch(case: str, out: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, __file__, "--child", case, "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _collect(case: str, proc: subprocess.Popen[str], started: float, limit_s: float) -> dict[str, Any]:
    try:
        stdout, stderr = proc.communicate(timeout=max(limit_s - (time.monotonic() - started), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        return {"status": "timeout", "stderr": stderr[-1500:], "s": round(time.monotonic() - started, 1)}
    entry: dict[str, Any] = {"s": round(time.monotonic() - started, 1)}
    if proc.returncode == 0 and stdout.strip():
        entry.update(status="ok", **json.loads(stdout.strip().splitlines()[-1]))
    else:
        entry.update(status=f"failed ({proc.returncode})", stderr=stderr[-1500:])
    print(f"{case}: {entry['status']} in {entry['s']} s", flush=True)
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--case-limit-s", type=float, default=150.0)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        _child(args.child, args.out)
        return 0

    import torch

    names = list(_cases())
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in names]
        if unknown:
            print(f"gpu_record: unknown case(s) {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
    results: dict[str, Any] = {}
    parallel = [n for n in names if n.startswith(PARALLEL_PREFIXES)]
    running: list[tuple[str, subprocess.Popen[str], float]] = []
    for case in parallel:
        while len(running) >= args.parallel:
            c, p, t = running.pop(0)
            results[c] = _collect(c, p, t, args.case_limit_s)
        running.append((case, _launch(case, args.out), time.monotonic()))
    for c, p, t in running:
        results[c] = _collect(c, p, t, args.case_limit_s)
    for case in names:
        if case not in results:
            results[case] = _collect(case, _launch(case, args.out), time.monotonic(), args.case_limit_s)
    expected = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "recorded_unix_s": int(time.time()),
        "planted_steps": PLANTED_STEPS,
        "cases": results,
    }
    (args.out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    failed = [c for c, r in results.items() if r.get("status") != "ok"]
    print(f"gpu_record: {len(results) - len(failed)}/{len(results)} cases ok" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())

"""What-if graph and replay: speed on the 455k-event HTA MTIA trace, identity-replay error over every
shared trace.

Speed: build the dependency graph (``aiprof.analysis.whatif.graph.build_graph``) and replay it once, on a
trace already loaded (loading is measured elsewhere: bench/floor.py); medians of ``--repeat``. Target:
graph + replay <= 2 s. Identity: per step, |replayed - observed| / observed over every trace under
../shared/traces (target: median <= 1 %, p95 <= 3 %), and of every multi-rank run there with its ranks joined at
their collectives.
Pairs (``--pairs``): the ResNet-50 ``num_workers`` 0 -> 4 fix from the TensorBoard plugin's samples: each
nw0 capture replayed with the data-loading wait removed, against the measured median step of each nw4
capture (4 pairs; target: median |error| <= 7 %, worst <= 15 %).
Run:  python bench/whatif_replay.py [--repeat 3] [--trace FILE] [--identity] [--pairs]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import aiprof
from aiprof.analysis.steps import step_windows
from aiprof.analysis.whatif.graph import build_graph
from aiprof.analysis.whatif.replay import replay, step_times
from aiprof.trace.model import RunSet, Trace

ROOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
MTIA = ROOT / "hta" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz"


def _traces(path: Path) -> list[Trace]:
    loaded = aiprof.load(path)
    return [loaded.rank(r) for r in loaded.ranks] if isinstance(loaded, RunSet) else [loaded]


def speed(path: Path, repeat: int) -> None:
    trace = _traces(path)[0]
    windows = step_windows(trace)
    builds, replays = [], []
    for _ in range(repeat):
        trace.cache.pop("whatif.graph", None)
        t0 = time.perf_counter()
        graph = build_graph(trace, windows)
        t1 = time.perf_counter()
        replay(graph)
        t2 = time.perf_counter()
        builds.append(t1 - t0)
        replays.append(t2 - t1)
    b, r = statistics.median(builds), statistics.median(replays)
    print(f"{path.name}: {trace.event_count:,} events, {len(trace):,} rows, {len(graph):,} nodes, "
          f"{graph.edge_count:,} edges; graph {b:.2f} s + replay {r:.2f} s = {b + r:.2f} s (target <= 2 s)")


def identity() -> None:
    errors: list[float] = []
    files = sorted(p for p in ROOT.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz", ".sqlite"))
                   and "perf_report" not in str(p))
    for path in files:
        try:
            traces = _traces(path)
        except aiprof.AiprofError:
            continue  # the few non-trace JSON files
        for trace in traces:
            graph = build_graph(trace)
            observed = np.array([w.duration_ns for w in graph.windows], dtype=np.float64)
            predicted = step_times(graph, replay(graph)).duration_ns.astype(np.float64)
            keep = observed > 0
            errors.extend((np.abs(predicted[keep] - observed[keep]) / observed[keep]).tolist())
    print(f"identity replay: {len(files)} files, {len(errors)} steps; median error {np.median(errors):.2%}, "
          f"p95 {np.percentile(errors, 95):.2%}, max {max(errors):.2%} (target: median <= 1 %, p95 <= 3 %)")


def joined_identity() -> None:
    """The identity replay of every shared multi-rank run with its ranks joined at their collectives
    (``aiprof.analysis.whatif.ranks``): per rank and step, |replayed - observed| / observed."""
    from aiprof.analysis.whatif.findings import RUN_REPLAY_MAX_EVENTS, whole_run
    from aiprof.analysis.whatif.ranks import build_run_graph, run_steps

    errors: list[float] = []
    runs = collectives = 0
    for folder in sorted({p.parent for p in ROOT.rglob("*") if p.is_file()}):
        try:
            loaded = aiprof.load(folder)
        except aiprof.AiprofError:
            continue
        if not isinstance(loaded, RunSet) or len(loaded.ranks) < 2:
            continue
        traces = [loaded.rank(r) for r in loaded.ranks]
        windows = [step_windows(t) for t in traces]
        if (sum(t.event_count for t in traces) > RUN_REPLAY_MAX_EVENTS or any(not w for w in windows)
                or not whole_run([t.distributed for t in traces])):
            continue  # too large, no steps, or not one run (a folder of unrelated captures)
        run = build_run_graph(traces, windows, list(loaded.ranks))
        _, times = run_steps(run, replay(run.graph))
        runs += 1
        collectives += len(run.collectives)
        for w, t in zip(windows, times):
            observed = np.array([x.duration_ns for x in w], dtype=np.float64)
            keep = observed > 0
            errors.extend((np.abs(t.duration_ns[keep] - observed[keep]) / observed[keep]).tolist())
        print(f"  {folder.relative_to(ROOT)}: {len(traces)} ranks, {len(run.collectives)} collectives joined")
    print(f"joined identity replay: {runs} multi-rank runs, {collectives} collectives joined, {len(errors)} rank steps; "
          f"median error {np.median(errors):.2%}, p95 {np.percentile(errors, 95):.2%}, max {max(errors):.2%}")


def pairs() -> None:
    from aiprof.analysis.whatif.edits import RemoveDataLoading, predict

    samples = ROOT / "kineto-tbplugin" / "samples"
    errors: list[float] = []
    measured = {p.name: float(np.median([w.duration_ns for w in step_windows(_traces(p)[0])]))
                for p in sorted((samples / "resnet50_num_workers_4").glob("*.json.gz"))}
    for before in sorted((samples / "resnet50_num_workers_0").glob("*.json.gz")):
        prediction = predict(build_graph(_traces(before)[0]), [RemoveDataLoading()])
        for name, after in measured.items():
            error = (prediction.predicted_median_ns - after) / after
            errors.append(error)
            print(f"{before.name} nw0 {prediction.baseline_median_ns / 1e6:.1f} ms -> predicted "
                  f"{prediction.predicted_median_ns / 1e6:.1f} ms; {name} nw4 measured {after / 1e6:.1f} ms: "
                  f"error {error:+.1%}")
    magnitude = np.abs(errors)
    print(f"ResNet-50 num_workers 0 -> 4: {len(errors)} pairs, median |error| {np.median(magnitude):.1%}, "
          f"worst {magnitude.max():.1%} (target: median <= 7 %, worst <= 15 %)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trace", type=Path, default=MTIA)
    parser.add_argument("--identity", action="store_true", help="also replay every shared trace")
    parser.add_argument("--pairs", action="store_true", help="also predict the ResNet-50 num_workers fix")
    args = parser.parse_args(argv)
    speed(args.trace, args.repeat)
    if args.identity:
        identity()
        joined_identity()
    if args.pairs:
        pairs()
    return 0


if __name__ == "__main__":
    sys.exit(main())

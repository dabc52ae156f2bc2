"""The whole run, not only the recorded steps: step time and throughput over every step ``aiprof run``
timed (the run directory's data-loader table, ``dataloader.rank<N>[-pid<P>].csv``), and where the
recorded (profiled) steps sit in it.

Numbers, all on the loader's clock (the time between two step boundaries, wall time):

* a step's time on several ranks is the slowest rank's (the others wait for it at the next collective);
  its samples and tokens are summed over ranks, its data-loader wait is the largest over ranks;
* **warm-up**: the leading steps slower than the spike threshold (at most a fifth of the steps); every
  statistic below is over the steady steps after them;
* **spike**: a steady step longer than median + ``SPIKE_K`` × MAD (MAD: median absolute deviation from the
  median, at least ``MAD_FLOOR`` of the median, so a run of identical steps does not call 1 % a spike);
* **one-time step**: a step above the spike threshold whose time holds a cost paid once, not the script's
  steady work: the profiler starting to trace (the step before and the first step of each cycle's warm-up,
  from ``meta.json``'s schedule; without it, the step before and the first recorded step), the profiler
  stopping and exporting its trace (each cycle's last recorded step and the step after), and the run's
  last step (what the script does after its last batch: evaluation, saving, exit); the steps between a
  cycle's start and stop are traced, and the profiler's overhead is in their time. Listed with its cause in
  ``one_time``, left out of the statistics and of ``spikes`` (which are the script's own); the first step
  is warm-up (above);
* median / p90 / p99 / mean: of the steady steps' times;
* **throughput**: steady samples (tokens) divided by the steady steps' total time; only when every steady
  step's batches told their size (``capture.dataloader.batch_size``);
* **data-loader wait share**: steady wait / steady time;
* **recorded window**: the step numbers of the trace's ``ProfilerStep#N`` (the loader numbers its steps the
  same way); *representative* when the recorded steps' median is within ``REPRESENTATIVE`` of the steady
  median and none of them is a warm-up step.

Step −1 (setup before the first step) and trailing steps without a batch (the loader's last, empty
``__next__`` after the loop) are not steps. Pure Python and NumPy: the analysis never needs torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from aiprof.rundir import LoaderWaits, read_waits
from aiprof.trace.model import I64

SPIKE_K = 6.0
MAD_FLOOR = 0.02  # of the median
REPRESENTATIVE = 0.10  # recorded median within ±10 % of the steady median
MAX_SERIES = 1000  # points in the time series; more steps: each point is the median of a chunk
MAX_SPIKES = 50  # spikes listed (the largest); spike_count counts them all
WARMUP_MAX_SHARE = 0.2


class Spike(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A steady step much slower than the median; ``cause`` set for a one-time step (module text)."""

    step: int
    duration_ns: int
    times_median: float
    cause: str = ""


class RecordedWindow(msgspec.Struct, kw_only=True):
    """Where the profiled steps sit in the whole run, and whether they look like it."""

    steps: list[int]
    found: int  # how many of them the loader table has
    median_ns: int | None = None
    ratio_to_run: float | None = None  # recorded median / steady median
    in_warmup: int = 0
    representative: bool | None = None
    verdict: str = ""


class WholeRun(msgspec.Struct, kw_only=True):
    """Step time and throughput over every step of the run (module text: what each number means)."""

    sources: list[str]
    ranks: int
    steps: int
    first_step: int
    last_step: int
    warmup_steps: list[int]
    steady_steps: int
    median_ns: int
    mean_ns: int
    p90_ns: int
    p99_ns: int
    total_ns: int
    spike_threshold_ns: int
    spike_count: int
    spikes: list[Spike]
    wait_share: float
    wait_median_ns: int
    samples_per_step: float | None = None
    tokens_per_step: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    series_steps: list[int]  # first step number of each point
    series_ns: list[int]  # step time (median of the chunk when the run has more than MAX_SERIES steps)
    series_wait_ns: list[int]
    recorded: RecordedWindow | None = None
    # Steps above the spike threshold that pay a one-time cost (profiler start, stop and export, the last
    # step), with the cause: not in the statistics, not in ``spikes``.
    one_time: list[Spike] = msgspec.field(default_factory=list)


@dataclass(frozen=True)
class _Table:
    """The combined per-step table, in step order."""

    numbers: I64
    durations: I64
    waits: I64
    samples: I64
    tokens: I64


def whole_run_of(run_dir: Path, recorded_steps: Iterable[int]) -> WholeRun | None:
    """The whole run from a run directory's data-loader tables, or None when it has none with steps."""
    from aiprof.rundir import read_meta

    paths = sorted(run_dir.glob("dataloader.rank*.csv"))
    tables = [(p.name, w) for p in paths if (w := read_waits(p)) is not None]
    schedule = read_meta(run_dir).get("schedule")
    return whole_run([w for _, w in tables], recorded_steps, sources=[n for n, _ in tables],
                     schedule=schedule if isinstance(schedule, dict) else None)


def whole_run(
    tables: Sequence[LoaderWaits], recorded_steps: Iterable[int], sources: Sequence[str] = (),
    schedule: Mapping[str, object] | None = None,
) -> WholeRun | None:
    """:class:`WholeRun` of per-rank loader tables (module text), or None when no table has a step.
    ``schedule``: the profiler schedule of ``meta.json`` (wait, warmup, active, repeat, skip_first), which
    says where the profiler started and stopped."""
    table = _combine(tables)
    if table is None:
        return None
    n = int(table.numbers.size)
    d = table.durations
    threshold_all = _threshold(d)
    warm = 0
    while warm < max(1, int(n * WARMUP_MAX_SHARE)) and warm < n - 1 and d[warm] > threshold_all:
        warm += 1
    recorded = sorted(set(recorded_steps))
    causes = one_time_causes(recorded, schedule, int(table.numbers[-1]))
    steady_mask = np.zeros(n, dtype=bool)
    steady_mask[warm:] = True
    candidate = np.array([int(k) in causes for k in table.numbers.tolist()], dtype=bool)
    once = np.zeros(n, dtype=bool)
    for _ in range(8):  # leaving a one-time step out lowers the threshold: others may now stand out
        new = steady_mask & candidate & (d > _threshold(d[steady_mask]))
        if not new.any() or int((steady_mask & ~new).sum()) == 0:
            break
        once |= new
        steady_mask &= ~new
    sd = d[steady_mask]
    median = float(np.median(sd))
    threshold = _threshold(sd)
    one_time = [Spike(step=int(table.numbers[i]), duration_ns=int(d[i]),
                      times_median=round(float(d[i]) / max(median, 1.0), 2), cause=causes[int(table.numbers[i])])
                for i in np.flatnonzero(once).tolist()]
    spike_idx = np.flatnonzero(steady_mask & (d > threshold))
    largest = spike_idx[np.argsort(-d[spike_idx], kind="stable")][:MAX_SPIKES]
    spikes = [
        Spike(step=int(table.numbers[i]), duration_ns=int(d[i]), times_median=round(float(d[i]) / max(median, 1.0), 2))
        for i in sorted(largest.tolist())
    ]
    total = int(sd.sum())
    samples, tokens = table.samples[steady_mask], table.tokens[steady_mask]
    per_s = 1e9 / total if total > 0 else 0.0
    known_samples = bool(samples.size) and bool((samples >= 0).all()) and int(samples.sum()) > 0
    known_tokens = bool(tokens.size) and bool((tokens >= 0).all()) and int(tokens.sum()) > 0
    series_steps, series_ns, series_wait = _series(table)
    return WholeRun(
        sources=list(sources),
        ranks=len(tables),
        steps=n,
        first_step=int(table.numbers[0]),
        last_step=int(table.numbers[-1]),
        warmup_steps=[int(x) for x in table.numbers[:warm]],
        steady_steps=int(steady_mask.sum()),
        median_ns=int(median),
        mean_ns=int(sd.mean()),
        p90_ns=int(np.percentile(sd, 90)),
        p99_ns=int(np.percentile(sd, 99)),
        total_ns=total,
        spike_threshold_ns=int(threshold),
        spike_count=int(spike_idx.size),
        spikes=spikes,
        wait_share=round(float(table.waits[steady_mask].sum()) / total, 4) if total > 0 else 0.0,
        wait_median_ns=int(np.median(table.waits[steady_mask])),
        samples_per_step=round(float(samples.mean()), 2) if known_samples else None,
        tokens_per_step=round(float(tokens.mean()), 2) if known_tokens else None,
        samples_per_s=round(float(samples.sum()) * per_s, 2) if known_samples else None,
        tokens_per_s=round(float(tokens.sum()) * per_s, 2) if known_tokens else None,
        series_steps=series_steps,
        series_ns=series_ns,
        series_wait_ns=series_wait,
        recorded=_recorded(table, recorded, warm, median),
        one_time=one_time,
    )


def one_time_causes(recorded: list[int], schedule: Mapping[str, object] | None, last_step: int) -> dict[int, str]:
    """Step number → the one-time cost its time may hold (module text): the profiler's start and its stop
    and export per cycle, from the schedule when it is known, else from the recorded steps; the last step."""
    causes: dict[int, str] = {last_step: "the run's last step (what the script does after its last batch: "
                                         "evaluation, saving, exit)"}
    cycles: list[tuple[int, int]] = []  # (first traced step, last recorded step)
    sched = _schedule(schedule)
    if sched is not None:
        wait, warmup, active, repeat, skip = sched
        length = wait + warmup + active
        r = 0
        while length > 0 and (repeat <= 0 or r < repeat) and skip + r * length + wait <= last_step:
            first = skip + r * length + wait
            cycles.append((first, first + warmup + active - 1))
            r += 1
    else:
        for group in _runs(recorded):
            cycles.append((group[0], group[-1]))
    for first, last in cycles:
        for k in (first - 1, first):
            causes.setdefault(k, f"the profiler starting to trace (at step {first})")
        for k in (last, last + 1):
            causes.setdefault(k, f"the profiler stopping and exporting its trace (after step {last})")
        for k in range(first + 1, last):
            causes.setdefault(k, "traced by the profiler (its own overhead is in the step's time)")
    return causes


def _schedule(schedule: Mapping[str, object] | None) -> tuple[int, int, int, int, int] | None:
    """(wait, warmup, active, repeat, skip_first) of a meta.json schedule; None when absent or malformed."""
    if not schedule:
        return None
    values = []
    for key in ("wait", "warmup", "active", "repeat", "skip_first"):
        v = schedule.get(key, 0)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return None
        values.append(v)
    wait, warmup, active, repeat, skip = values
    return (wait, warmup, active, repeat, skip) if active > 0 else None


def _runs(numbers: list[int]) -> list[list[int]]:
    """Consecutive runs of sorted step numbers."""
    out: list[list[int]] = []
    for k in numbers:
        if out and k == out[-1][-1] + 1:
            out[-1].append(k)
        else:
            out.append([k])
    return out


def _combine(tables: Sequence[LoaderWaits]) -> _Table | None:
    """One row per step number over ranks: slowest rank's time, largest wait, samples/tokens summed."""
    rows: dict[int, list[int]] = {}
    for t in tables:
        size = len(t.steps)
        samples = t.samples if len(t.samples) == size else (-1,) * size
        tokens = t.tokens if len(t.tokens) == size else (-1,) * size
        last_batch = max((i for i in range(size) if t.batches[i] > 0), default=size - 1)
        for i in range(size):
            number, dur = t.steps[i], t.ends_unix_ns[i] - t.starts_unix_ns[i]
            if number < 0 or dur <= 0 or i > last_batch:
                continue  # setup, a clock step back, the empty __next__ after the loop
            row = rows.get(number)
            if row is None:
                rows[number] = [dur, t.waits_ns[i], samples[i], tokens[i]]
                continue
            row[0], row[1] = max(row[0], dur), max(row[1], t.waits_ns[i])
            row[2] = -1 if min(row[2], samples[i]) < 0 else row[2] + samples[i]
            row[3] = -1 if min(row[3], tokens[i]) < 0 else row[3] + tokens[i]
    if not rows:
        return None
    numbers = np.array(sorted(rows), dtype=np.int64)
    values = np.array([rows[k] for k in numbers.tolist()], dtype=np.int64)
    return _Table(numbers, values[:, 0], values[:, 1], values[:, 2], values[:, 3])


def _threshold(d: I64) -> float:
    """median + SPIKE_K × MAD, with the MAD at least MAD_FLOOR of the median."""
    median = float(np.median(d))
    mad = max(float(np.median(np.abs(d - median))), MAD_FLOOR * median)
    return median + SPIKE_K * mad


def _series(table: _Table) -> tuple[list[int], list[int], list[int]]:
    """The time series, at most MAX_SERIES points (chunk medians beyond that)."""
    n = int(table.numbers.size)
    if n <= MAX_SERIES:
        return table.numbers.tolist(), table.durations.tolist(), table.waits.tolist()
    starts = (np.arange(MAX_SERIES, dtype=np.int64) * n) // MAX_SERIES
    ends = np.append(starts[1:], n)
    steps = [int(table.numbers[s]) for s in starts.tolist()]
    med = [int(np.median(table.durations[s:e])) for s, e in zip(starts.tolist(), ends.tolist())]
    wait = [int(np.median(table.waits[s:e])) for s, e in zip(starts.tolist(), ends.tolist())]
    return steps, med, wait


def _recorded(table: _Table, recorded: list[int], warm: int, median: float) -> RecordedWindow | None:
    """The recorded steps' place in the run and the verdict on them."""
    if not recorded:
        return None
    index = {int(k): i for i, k in enumerate(table.numbers.tolist())}
    found = [index[k] for k in recorded if k in index]
    span = f"step {recorded[0]}" if len(recorded) == 1 else f"steps {recorded[0]}–{recorded[-1]}"
    if not found:
        return RecordedWindow(steps=recorded, found=0,
                              verdict=f"The recorded {span} are not in the run's step table: no comparison.")
    rec_median = float(np.median(table.durations[found]))
    ratio = rec_median / max(median, 1.0)
    in_warmup = sum(1 for i in found if i < warm)
    representative = in_warmup == 0 and abs(ratio - 1.0) <= REPRESENTATIVE
    change = f"{100 * (ratio - 1):+.0f} %"
    if representative:
        verdict = f"The recorded {span} are representative: their median is {change} from the whole run's."
    else:
        why = f"{in_warmup} of them in warm-up; " if in_warmup else ""
        overhead = " (the profiler's own overhead slows the steps it records)" if ratio > 1 and not in_warmup else ""
        verdict = (f"The recorded {span} are not representative: {why}their median is {change} from the whole "
                   f"run's{overhead}; record other steps (aiprof run --wait/--warmup) or read the whole-run numbers.")
    return RecordedWindow(steps=recorded, found=len(found), median_ns=int(rec_median), ratio_to_run=round(ratio, 4),
                          in_warmup=in_warmup, representative=representative, verdict=verdict)

"""Trace analysis speed and memory: aiprof against HTA (and TraceLens when installed) and the decode floor.

Every measurement is a fresh subprocess, run ``--repeat`` times; we report the median wall time and CPU
time (the process and the helpers it waited for). Peak memory comes from one more run of the same
command, sampled: the larger of (a) ``ru_maxrss`` from ``os.wait4`` (exact, but the largest single
process of the tree) and (b) the sum of PSS over the process tree, sampled every 20 ms (counts forked
helper processes, without counting the pages they share with their parent twice; for a single process
(a) decides). Timed runs are not sampled: reading the tree's PSS every 20 ms takes a share of a core,
which slowed a tool using both cores of a 2-core machine by ~10 %. The sources measured are
byte-compiled first, as an installed package is.

Targets from issue 2: aiprof >= 10x faster than HTA / TraceLens on the same trace, peak RSS <= 1/3 of
theirs, and within 2x of the floor (read + gunzip + fastest typed decode, timed as a whole process the
same way). Scaling: aiprof on synthetic traces of 0.1M, 0.3M and 1.3M events, and 1, 2, 4, 8 ranks.

Usage:  python bench/run_all.py [--repeat 3] [--quick] [--only real,synth,events,ranks] [--aiprof cli|load]
``make bench`` runs it with the defaults (about 12 minutes on 2 cores; HTA is most of it). It creates the peer venvs first (bench/setup_peers.sh).
Results also go to bench/out/results.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
import synth  # noqa: E402  (bench/ is not a package)

TRACES = ROOT / ".." / "shared" / "traces"
REAL_TRACES = {
    "hta/mtia_trace_single_rank": TRACES / "hta" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz",
    "tracelens/h100/owlv2": TRACES / "tracelens" / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz",
}
VENV_BIN = ROOT / ".venv" / "bin"
HTA_PY = BENCH / ".venv-hta" / "bin" / "python"
TRACELENS_PY = BENCH / ".venv-tracelens" / "bin" / "python"
FLOOR_PY = BENCH / ".venv-floor" / "bin" / "python"

# The aiprof command under test. {bin}: the project venv's bin folder; {trace}: file or folder; {out}: a
# fresh output path. To switch between the analyze CLI and "load only", change AIPROF_DEFAULT (or pass
# --aiprof cli|load); "auto" takes the CLI when `aiprof analyze --help` works, else load only.
AIPROF_COMMANDS = {
    "cli": "{bin}/aiprof analyze {trace} -o {out}",
    "load": "{bin}/python -c 'import sys, aiprof; aiprof.load(sys.argv[1])' {trace}",
}
AIPROF_DEFAULT = "auto"

SAMPLE_S = 0.02


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    maxrss_mb: float
    tree_rss_mb: float
    rc: int
    tree_pss_mb: float = 0.0

    @property
    def peak_mb(self) -> float:
        """Peak memory of the run: the larger of the biggest process's peak RSS and the sampled peak of
        the whole tree's PSS. PSS (proportional set size) splits pages shared between processes among
        them, so forked helpers are counted without counting the pages they share with their parent
        twice; for a single process it is at most its RSS, so the first term decides."""
        return max(self.maxrss_mb, self.tree_pss_mb)


@dataclass
class Result:
    label: str
    tool: str
    trace: str
    cmd: str
    runs: list[Run] = field(default_factory=list)  # timed, not sampled
    memory_runs: list[Run] = field(default_factory=list)  # sampled for the peak, not timed
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.error

    @property
    def wall(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def peak(self) -> float:
        return statistics.median(r.peak_mb for r in (self.memory_runs or self.runs))

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu_s for r in self.runs)


# ---------------------------------------------------------------------------------------------------
# Measuring one child process
# ---------------------------------------------------------------------------------------------------
def _tree_rss_mb(pid: int) -> tuple[float, float]:
    """Sum of RSS and of PSS (MB) of ``pid`` and its descendants, from /proc (no psutil needed). Walks
    only the tree (``/proc/PID/task/TID/children``), so a sample costs ~0.1 ms plus the PSS reads: the
    sampler must not steal much of a core from a tool that uses all of them."""
    page = os.sysconf("SC_PAGE_SIZE")
    total, pss, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm", "rb") as fh:
                rss = int(fh.read().split()[1]) * page
        except OSError:
            continue
        total += rss
        pss += _pss(p, rss)
        todo.extend(_children(p))
    return total / 2**20, pss / 2**20


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            continue
    return out


def _pss(pid: int, fallback: int) -> int:
    """Proportional set size of one process in bytes (its RSS where smaps_rollup is unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return fallback


def measure(cmd: list[str], log: Path, env: dict[str, str] | None = None, sample: bool = True) -> tuple[Run, str]:
    """Run ``cmd`` once; wall time, CPU time and (``sample``) peak RSS/PSS of its whole process tree; its
    stdout."""
    with tempfile.TemporaryFile() as out, open(log, "ab") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env)
        peak = [0.0, 0.0]
        done = threading.Event()

        def sampling() -> None:
            while not done.wait(SAMPLE_S):
                rss, pss = _tree_rss_mb(proc.pid)
                peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

        sampler = threading.Thread(target=sampling, daemon=True)
        if sample:
            sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        if sample:
            sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    run = Run(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        maxrss_mb=usage.ru_maxrss / 1024,
        tree_rss_mb=peak[0],
        rc=proc.returncode,
        tree_pss_mb=peak[1],
    )
    return run, stdout


def bench(
    label: str, tool: str, trace: Path, cmd: list[str], repeat: int, log: Path, env: dict[str, str] | None = None
) -> Result:
    res = Result(label=label, tool=tool, trace=str(trace), cmd=shlex.join(cmd))
    for i in range(repeat + 1):
        run, stdout = measure(cmd, log, env, sample=i == repeat)  # the last run: memory only
        if run.rc != 0:
            res.error = f"exit {run.rc} (see {log})"
            break
        (res.memory_runs if i == repeat else res.runs).append(run)
        if stdout.strip().startswith("{"):
            try:
                res.info = json.loads(stdout.strip().splitlines()[-1])
            except json.JSONDecodeError:
                pass
    status = f"{res.wall:7.2f} s {res.cpu:7.2f} s CPU {res.peak:7.0f} MB" if res.ok else res.error
    print(f"  {label:<38} {tool:<12} {status}", file=sys.stderr, flush=True)
    return res


# ---------------------------------------------------------------------------------------------------
# The commands
# ---------------------------------------------------------------------------------------------------
def snapshot(rev: str) -> tuple[str, dict[str, str] | None]:
    """Export ``src/`` at ``rev`` to a temp folder and point PYTHONPATH at it.

    Why: several engineers edit the working tree while the benchmark runs; a snapshot measures one
    commit, and says which. ``worktree`` measures the working tree as it is.
    """
    if rev == "worktree":
        _compile(ROOT / "src")
        return "working tree", None
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    dest = Path(tempfile.mkdtemp(prefix=f"aiprof-src-{commit}-"))
    listed = subprocess.run(["git", "ls-tree", "--name-only", commit], capture_output=True, text=True, cwd=ROOT)
    parts = ["src"] + [name for name in ("setup.py", "pyproject.toml", "README.md") if name in listed.stdout.split()]
    archive = subprocess.run(["git", "archive", commit, *parts], capture_output=True, check=True, cwd=ROOT)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    _build_native(dest)
    _compile(dest / "src")
    env = dict(os.environ, PYTHONPATH=str(dest / "src"))
    return f"commit {commit}", env


def _build_native(dest: Path) -> None:
    """Build the snapshot's native columniser in place, as ``pip install`` does (commits before it had
    none; a failed build leaves the snapshot on its pure-Python path, and says so)."""
    if not (dest / "setup.py").exists():
        return
    done = subprocess.run(
        [str(VENV_BIN / "python"), "setup.py", "-q", "build_ext", "--inplace"], capture_output=True, text=True, cwd=dest
    )
    if done.returncode != 0:
        print(f"warning: the native columniser did not build; measuring the pure-Python loader\n{done.stderr[-2000:]}")


def _compile(src: Path) -> None:
    """Byte-compile the measured sources, as ``pip install`` does for an installed package (and for the
    peers in their venvs): otherwise, with PYTHONDONTWRITEBYTECODE set, every run recompiles them."""
    subprocess.run([str(VENV_BIN / "python"), "-m", "compileall", "-q", str(src)], check=True, capture_output=True)


def aiprof_mode(requested: str, env: dict[str, str] | None) -> str:
    if requested != "auto":
        return requested
    probe = subprocess.run(
        [str(VENV_BIN / "aiprof"), "analyze", "--help"], capture_output=True, cwd=ROOT, check=False, env=env
    )
    return "cli" if probe.returncode == 0 else "load"


def aiprof_cmd(mode: str, trace: Path, out: Path) -> list[str]:
    return shlex.split(AIPROF_COMMANDS[mode].format(bin=VENV_BIN, trace=shlex.quote(str(trace)), out=out))


def floor_cmd(trace: Path) -> list[str]:
    return [str(FLOOR_PY), str(BENCH / "floor.py"), str(trace), "--only", "msgspec-min"]


def floor_stages(trace: Path) -> dict[str, Any]:
    """In-process stage times (best of 3): read, gunzip, each decoder."""
    out = subprocess.run(
        [str(FLOOR_PY), str(BENCH / "floor.py"), str(trace), "--repeat", "3"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return dict(json.loads(out.stdout))


def compare_trace(name: str, trace: Path, args: argparse.Namespace, log: Path, out: Path) -> dict[str, Any]:
    """aiprof, floor and peers on one trace."""
    print(f"{name}: {trace}", file=sys.stderr)
    stages = floor_stages(trace)
    print(
        f"  floor stages (in-process, best of 3): gunzip {stages['gunzip_s']:.3f} s, "
        + ", ".join(f"{k} {v:.3f} s" for k, v in stages["decode_s"].items()),
        file=sys.stderr,
    )
    row: dict[str, Any] = {"trace": name, "path": str(trace), "events": stages["events"], "json_mb": stages["json_mb"]}
    row["floor_stages"] = stages
    row["aiprof"] = bench(name, "aiprof", trace, aiprof_cmd(args.aiprof, trace, out), args.repeat, log, args.env)
    row["floor"] = bench(name, "floor", trace, floor_cmd(trace), args.repeat, log)
    if not args.no_peers:
        row["hta"] = bench(name, "HTA 0.5.0", trace, [str(HTA_PY), str(BENCH / "peer_hta.py"), str(trace)], args.peer_repeat, log)
        if TRACELENS_PY.exists() and (BENCH / ".venv-tracelens" / ".ok").exists():
            cmd = [str(TRACELENS_PY), str(BENCH / "peer_tracelens.py"), str(trace)]
            row["tracelens"] = bench(name, "TraceLens", trace, cmd, args.peer_repeat, log)
    return row


def scaling(args: argparse.Namespace, log: Path, out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """aiprof against event count (1 rank) and against rank count (``--rank-events`` per rank)."""
    by_events: list[dict[str, Any]] = []
    by_ranks: list[dict[str, Any]] = []
    if "events" in args.only:
        print("scaling with events (1 rank)", file=sys.stderr)
        for n in args.events:
            trace = synth.ensure(n, 1)
            ev = synth.event_count(n, 1)
            cmd = aiprof_cmd(args.aiprof, trace, out)
            res = bench(f"synthetic {ev / 1e6:.2f}M events", "aiprof", trace, cmd, args.repeat, log, args.env)
            by_events.append({"events": ev, "ranks": 1, "aiprof": res})
    if "ranks" in args.only:
        print(f"scaling with ranks ({args.rank_events / 1e6:.2f}M events per rank)", file=sys.stderr)
        for r in args.ranks:
            trace = synth.ensure(args.rank_events, r)
            ev = synth.event_count(args.rank_events, r)
            cmd = aiprof_cmd(args.aiprof, trace, out)
            res = bench(f"synthetic {r} rank(s)", "aiprof", trace, cmd, args.repeat, log, args.env)
            by_ranks.append({"events": ev, "ranks": r, "aiprof": res})
        if not args.no_peers and not args.quick and by_ranks:
            # HTA on the largest folder only, once: it takes ~1.5 minutes at 8 x 0.3M events
            last, trace = by_ranks[-1], synth.ensure(args.rank_events, args.ranks[-1])
            cmd = [str(HTA_PY), str(BENCH / "peer_hta.py"), str(trace)]
            last["hta"] = bench(f"synthetic {last['ranks']} rank(s)", "HTA 0.5.0", trace, cmd, 1, log)
    return by_events, by_ranks


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------
def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def report(
    rows: list[dict[str, Any]], by_events: list[dict[str, Any]], by_ranks: list[dict[str, Any]], mode: str, source: str
) -> str:
    label = "`aiprof analyze TRACE -o OUT.json`" if mode == "cli" else "aiprof (load only: `aiprof.load(path)`)"
    lines = [f"aiprof measured as: {label}, {source}", ""]
    if rows:
        lines += [
            "| trace | events | JSON MB | tool | wall s | CPU s | peak MB |",
            "|---|---:|---:|---|---:|---:|---:|",
        ]
        for row in rows:
            for key in ("aiprof", "floor", "hta", "tracelens"):
                r = row.get(key)
                if r is None:
                    continue
                name = "floor (read+gunzip+msgspec)" if key == "floor" else r.tool
                nums = f"{r.wall:.2f} | {r.cpu:.2f} | {r.peak:.0f}" if r.ok else f"{r.error} | |"
                lines.append(f"| {row['trace']} | {row['events']:,} | {row['json_mb']} | {name} | {nums} |")
        lines += [
            "",
            "Floor stages, in-process (best of 3, seconds):",
            "",
            "| trace | gunzip zlib | gunzip isal | msgspec-min | msgspec-args | orjson | floor = read+fastest gunzip+fastest decode |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            st = row["floor_stages"]
            d = st["decode_s"]
            by = st.get("gunzip_s_by", {"zlib": st["gunzip_s"]})
            isal = f"{by['isal']:.3f}" if "isal" in by else "–"
            lines.append(
                f"| {row['trace']} | {by['zlib']:.3f} | {isal} | {d['msgspec-min']:.3f} | {d['msgspec-args']:.3f} | "
                f"{d['orjson']:.3f} | {st['floor_s']:.3f} |"
            )
        lines += [
            "",
            "Ratios and targets (issue 2: peer / aiprof time >= 10, aiprof / peer RSS <= 1/3, aiprof / floor <= 2):",
            "",
            "| trace | peer | peer / aiprof wall | peer / aiprof CPU | aiprof / peer RSS | aiprof / floor wall | aiprof / floor CPU | 10x faster | 1/3 RSS | 2x floor |",
            "|---|---|---:|---:|---:|---:|---:|---|---|---|",
        ]
        for row in rows:
            a, f = row["aiprof"], row["floor"]
            if not (a.ok and f.ok):
                continue
            for k in ("hta", "tracelens"):
                p = row.get(k)
                if p is None or not p.ok:
                    continue
                lines.append(
                    f"| {row['trace']} | {p.tool} | {p.wall / a.wall:.1f}x | {p.cpu / a.cpu:.1f}x | {a.peak / p.peak:.2f} | "
                    f"{a.wall / f.wall:.1f}x | {a.cpu / f.cpu:.1f}x | {_mark(p.wall / a.wall >= 10)} | "
                    f"{_mark(a.peak / p.peak <= 1 / 3)} | {_mark(a.wall / f.wall <= 2)} |"
                )
        lines.append("")
    for title, table in (("events (1 rank)", by_events), ("ranks", by_ranks)):
        if not table:
            continue
        base = table[0]
        lines += [
            f"Scaling with {title}:",
            "",
            "| ranks | events per rank | total events | aiprof s | CPU s | peak MB | µs per event | time vs first row | RSS vs first row |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for t in table:
            a = t["aiprof"]
            if not a.ok:
                lines.append(f"| {t['ranks']} | {t['events']:,} | | {a.error} | | | | | |")
                continue
            total = t["events"] * t["ranks"]
            b = base["aiprof"]
            lines.append(
                f"| {t['ranks']} | {t['events']:,} | {total:,} | {a.wall:.2f} | {a.cpu:.2f} | {a.peak:.0f} | "
                f"{a.wall / total * 1e6:.2f} | {a.wall / b.wall:.1f}x | {a.peak / b.peak:.1f}x |"
            )
        for t in table:
            p = t.get("hta")
            if p is not None and p.ok and t["aiprof"].ok:
                a = t["aiprof"]
                lines += [
                    "",
                    f"HTA 0.5.0 on the {t['ranks']}-rank folder (1 run): {p.wall:.2f} s wall, {p.cpu:.2f} s CPU, "
                    f"{p.peak:.0f} MB peak; HTA / aiprof: {p.wall / a.wall:.1f}x wall, {p.cpu / a.cpu:.1f}x CPU, "
                    f"aiprof / HTA RSS {a.peak / p.peak:.2f}.",
                    "",
                ]
        lines.append("")
    return "\n".join(lines)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Result):
        d = asdict(obj)
        if obj.ok:
            d.update(wall_median_s=obj.wall, peak_median_mb=obj.peak, cpu_median_s=obj.cpu)
        return d
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return obj


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--peer-repeat", type=int, default=None, help="runs per peer measurement (default: --repeat)")
    ap.add_argument("--quick", action="store_true", help="1 run each, no HTA on the synthetic trace")
    ap.add_argument("--only", default="real,synth,events,ranks", help="comma list of: real, synth, events, ranks")
    ap.add_argument("--aiprof", choices=("auto", "cli", "load"), default=AIPROF_DEFAULT)
    ap.add_argument("--no-peers", action="store_true", help="skip HTA / TraceLens")
    ap.add_argument("--synth-events", type=int, default=1_300_000, help="events of the synthetic comparison trace")
    ap.add_argument("--events", type=lambda s: [int(float(x)) for x in s.split(",")], default=[100_000, 300_000, 1_300_000])
    ap.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8])
    ap.add_argument("--rank-events", type=int, default=300_000, help="events per rank for the rank scaling")
    ap.add_argument("--json", type=Path, default=BENCH / "out" / "results.json")
    ap.add_argument(
        "--snapshot", default="HEAD", help="git revision of src/ to measure (default HEAD), or 'worktree'"
    )
    args = ap.parse_args()
    args.only = set(args.only.split(","))
    if args.quick:
        args.repeat = 1
    args.peer_repeat = args.peer_repeat or args.repeat

    if not args.no_peers:
        subprocess.run(["bash", str(BENCH / "setup_peers.sh")], check=True, cwd=ROOT)
    if not FLOOR_PY.exists():
        sys.exit("bench/.venv-floor is missing: run bench/setup_peers.sh")
    args.source, args.env = snapshot(args.snapshot)
    args.aiprof = aiprof_mode(args.aiprof, args.env)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    log = args.json.parent / "children.log"
    log.write_bytes(b"")
    out = Path(tempfile.mkdtemp(prefix="aiprof-bench-")) / "analysis.json"
    print(f"aiprof {args.aiprof} from {args.source}; repeat {args.repeat}; child stderr in {log}", file=sys.stderr)

    load_start = "/".join(f"{x:.1f}" for x in os.getloadavg())
    rows: list[dict[str, Any]] = []
    if "real" in args.only:
        for name, path in REAL_TRACES.items():
            if path.exists():
                rows.append(compare_trace(name, path, args, log, out))
            else:
                print(f"{name}: {path} not found (needs ../shared/traces), skipped", file=sys.stderr)
    if "synth" in args.only:
        trace = synth.ensure(args.synth_events, 1)
        saved = args.no_peers
        args.no_peers = args.no_peers or args.quick
        rows.append(compare_trace(f"synthetic {synth.event_count(args.synth_events, 1) / 1e6:.2f}M", trace, args, log, out))
        args.no_peers = saved
    by_events, by_ranks = scaling(args, log, out)

    text = report(rows, by_events, by_ranks, args.aiprof, args.source)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    machine = (
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average at start {load_start}, at end {load}"
    )
    print(f"\n{machine}\n\n{text}")
    args.json.write_text(
        json.dumps(
            _jsonable({"machine": machine, "aiprof_mode": args.aiprof, "source": args.source, "compare": rows, "events": by_events, "ranks": by_ranks}),
            indent=1,
        )
    )
    print(f"(raw numbers: {args.json})", file=sys.stderr)


if __name__ == "__main__":
    main()

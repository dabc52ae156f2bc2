"""Generate a synthetic but realistic Kineto trace (and a multi-rank folder) for the scaling benchmark.

Why synthetic: the real traces in ../shared/traces stop at ~455k events; the benchmark must show how
time and memory grow to 1.3M events and 8 ranks. The shape follows what torch.profiler 2.x writes (see
the H100 traces in shared/traces/tracelens): a ``ProfilerStep#N`` user annotation per step (and its
``gpu_user_annotation`` twin), a DataLoader annotation, an H2D copy, per layer a forward on the main
thread (``aten::linear`` > ``aten::t`` + ``aten::addmm``, ``aten::relu``) and a backward on the autograd
thread (``autograd::engine::evaluate_function: ...`` > ``AddmmBackward0`` > ``aten::mm`` x2, ...), every
launching op followed by a ``cudaLaunchKernel`` runtime span, its ``ac2g`` flow pair and the kernel on
stream 7 linked by ``correlation`` and ``External id``; autograd ``Sequence number`` linking forward and
backward ops; an NCCL all-reduce per gradient bucket on stream 20 overlapping the backward; an optimizer step with ``multi_tensor_apply`` kernels and a final ``cudaStreamSynchronize``.
GPU time is simulated with a queue, so the GPU both idles (launch-bound stretches) and backs up.
Like a real profiler schedule, a trace holds a few steps (8): more events means a bigger model (more
layers per step), not more steps.

Ranks are replicas of one event stream with their own ``distributedInfo`` (and pid), written in the
same pass: generating once and writing N gzip streams keeps the 8-rank folder cheap to make.

Files are written to a cache folder (default: $TMPDIR/aiprof-bench-synth), never into the repository,
and reused when present with the same parameters.

Usage:  python bench/synth.py --events 1300000 --ranks 1 [--out DIR]   -> prints the trace path
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Events written per layer (forward 12 + backward 19) and per step outside the layers; used to pick the
# number of steps for a requested event count. Checked against the real count after writing.
_EVENTS_PER_LAYER = 31
_EVENTS_PER_STEP_FIXED = 26
_STEPS = 8  # a profiler schedule records a few steps; a bigger trace means a bigger model, not more steps
_BUCKET = 24  # layers per DDP gradient bucket: one all-reduce per bucket during the backward
_BASE_US = 1_700_000_000_000.0  # a plausible absolute µs clock, like Kineto's
_PID = 4242
_MAIN_TID = 4242
_BWD_TID = 4300
_COMPUTE_STREAM = 7
_COMM_STREAM = 20


def default_cache_dir() -> Path:
    return Path(os.environ.get("AIPROF_BENCH_SYNTH", Path(tempfile.gettempdir()) / "aiprof-bench-synth"))


class _Gen:
    """Emits the event stream of one rank as JSON text fragments, keeping CPU and GPU clocks."""

    def __init__(self, seed: int, world_size: int, layers: int) -> None:
        self.rng = random.Random(seed)
        self.layers = layers
        self.world_size = world_size
        self.ext = 0
        self.corr = 0
        self.cpu = {_MAIN_TID: _BASE_US + 1000.0, _BWD_TID: _BASE_US + 1000.0}
        self.gpu_free = {_COMPUTE_STREAM: _BASE_US, _COMM_STREAM: _BASE_US}
        self.count = 0
        # autograd sequence numbers: forward ops take the next one, their backward nodes reuse it
        self.seq = 0
        self.fwd_seq: dict[int, tuple[int, int]] = {}

    # -- primitives ------------------------------------------------------------------------------
    def _x(self, cat: str, name: str, tid: int, ts: float, dur: float, args: str, pid: int = _PID) -> str:
        self.count += 1
        return (
            f'{{"ph":"X","cat":"{cat}","name":"{name}","pid":{pid},"tid":{tid},'
            f'"ts":{ts:.3f},"dur":{dur:.3f},"args":{{{args}}}}}'
        )

    def _flow(self, ph: str, corr: int, tid: int, ts: float, pid: int = _PID) -> str:
        self.count += 1
        bp = ',"bp":"e"' if ph == "f" else ""
        return f'{{"ph":"{ph}","id":{corr},"pid":{pid},"tid":{tid},"ts":{ts:.3f},"cat":"ac2g","name":"ac2g"{bp}}}'

    def _advance(self, tid: int, us: float) -> float:
        start = self.cpu[tid]
        self.cpu[tid] = start + us
        return start

    def _launch(
        self, tid: int, ext: int, kernel: str, gpu_us: float, stream: int = _COMPUTE_STREAM, extra: str = ""
    ) -> Iterator[str]:
        """cudaLaunchKernel + flow pair + the kernel, queued behind the stream's previous work."""
        self.corr += 1
        corr = self.corr
        launch_dur = self.rng.uniform(3.0, 8.0)
        ts = self._advance(tid, launch_dur + 0.5)
        yield self._x(
            "cuda_runtime", "cudaLaunchKernel", tid, ts, launch_dur, f'"External id":{ext},"cbid":211,"correlation":{corr}'
        )
        k_ts = max(ts + launch_dur + self.rng.uniform(2.0, 6.0), self.gpu_free[stream] + 1.0)
        self.gpu_free[stream] = k_ts + gpu_us
        yield self._flow("s", corr, tid, ts)
        yield self._flow("f", corr, stream, k_ts, pid=0)
        grid = self.rng.choice(("[108,1,1]", "[216,2,1]", "[64,4,1]", "[1024,1,1]"))
        yield self._x(
            "kernel",
            kernel,
            stream,
            k_ts,
            gpu_us,
            f'"External id":{ext},"queued":0,"device":0,"context":1,"stream":{stream},"correlation":{corr},'
            f'"registers per thread":{self.rng.choice((32, 64, 128, 168))},"shared memory":{self.rng.choice((0, 16384, 49152))},'
            f'"blocks per SM":{self.rng.uniform(0.5, 8):.4f},"warps per SM":{self.rng.uniform(2, 32):.4f},'
            f'"grid":{grid},"block":[256,1,1],"est. achieved occupancy %":{self.rng.randint(10, 100)}{extra}',
            pid=0,
        )

    def _op(self, name: str, tid: int, dims: str = "[[32, 1024], [1024, 1024]]", extra: str = "") -> tuple[int, str]:
        """A new External id and the cpu_op args for it (recorded shapes, like record_shapes=True)."""
        self.ext += 1
        return self.ext, (
            f'"External id":{self.ext},"Record function id":0,"Input Dims":{dims},'
            f'"Input type":["float","float"],"Input Strides":[[1024,1],[1,1024]],"Concrete Inputs":["",""]{extra}'
        )

    def _span(self, tid: int, start: float, name: str, args: str, cat: str = "cpu_op") -> str:
        end = self._advance(tid, self.rng.uniform(1.0, 3.0))
        return self._x(cat, name, tid, start, end - start + 0.5, args)

    # -- model pieces ----------------------------------------------------------------------------
    def _forward_layer(self, layer: int) -> Iterator[str]:
        t = _MAIN_TID
        lin_start = self._advance(t, 2.0)
        lin_ext, lin_args = self._op("aten::linear", t)
        t_start = self._advance(t, 1.0)
        _, t_args = self._op("aten::t", t, dims="[[1024, 1024]]")
        yield self._span(t, t_start, "aten::t", t_args)
        mm_start = self._advance(t, 1.5)
        self.seq += 2
        self.fwd_seq[layer] = (self.seq - 1, self.seq)
        mm_ext, mm_args = self._op(
            "aten::addmm", t, dims="[[1024], [32, 1024], [1024, 1024], [], []]", extra=f',"Sequence number":{self.seq - 1}'
        )
        yield from self._launch(t, mm_ext, "ampere_sgemm_128x64_tn", self.rng.uniform(15, 60))
        yield self._span(t, mm_start, "aten::addmm", mm_args)
        yield self._span(t, lin_start, "aten::linear", lin_args)
        relu_start = self._advance(t, 1.5)
        relu_ext, relu_args = self._op("aten::relu", t, dims="[[32, 1024]]", extra=f',"Sequence number":{self.seq}')
        yield from self._launch(
            t,
            relu_ext,
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>",
            self.rng.uniform(2, 6),
        )
        yield self._span(t, relu_start, "aten::relu", relu_args)

    def _backward_layer(self, layer: int) -> Iterator[str]:
        t = _BWD_TID
        mm_seq, seq = self.fwd_seq[layer]
        e_start = self._advance(t, 2.0)
        _, e_args = self._op("autograd::engine::evaluate_function: ReluBackward0", t, dims="[]")
        r_start = self._advance(t, 1.0)
        _, r_args = self._op("ReluBackward0", t, dims="[[32, 1024]]", extra=f',"Sequence number":{seq},"Fwd thread id":1')
        th_start = self._advance(t, 1.0)
        th_ext, th_args = self._op("aten::threshold_backward", t, dims="[[32, 1024], [32, 1024], []]")
        yield from self._launch(
            t, th_ext, "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl>", self.rng.uniform(2, 6)
        )
        yield self._span(t, th_start, "aten::threshold_backward", th_args)
        yield self._span(t, r_start, "ReluBackward0", r_args)
        yield self._span(t, e_start, "autograd::engine::evaluate_function: ReluBackward0", e_args)
        e_start = self._advance(t, 2.0)
        _, e_args = self._op("autograd::engine::evaluate_function: AddmmBackward0", t, dims="[]")
        a_start = self._advance(t, 1.0)
        _, a_args = self._op("AddmmBackward0", t, dims="[[32, 1024]]", extra=f',"Sequence number":{mm_seq},"Fwd thread id":1')
        for _ in range(2):
            m_start = self._advance(t, 1.0)
            m_ext, m_args = self._op("aten::mm", t, dims="[[32, 1024], [1024, 1024]]")
            yield from self._launch(t, m_ext, "ampere_sgemm_64x32_sliced1x4_nn", self.rng.uniform(15, 60))
            yield self._span(t, m_start, "aten::mm", m_args)
        yield self._span(t, a_start, "AddmmBackward0", a_args)
        yield self._span(t, e_start, "autograd::engine::evaluate_function: AddmmBackward0", e_args)

    def _allreduce(self, step: int) -> Iterator[str]:
        t = _BWD_TID
        start = self._advance(t, 2.0)
        ext, args = self._op(
            "record_param_comms",
            t,
            dims="[[4194304]]",
            extra=(
                ',"Collective name":"allreduce","dtype":"Float","In msg nelems":4194304,"Out msg nelems":4194304,'
                f'"Group size":{self.world_size},"Process Group Name":"0","Process Group Description":"default_pg",'
                f'"Process Group Ranks":"{list(range(self.world_size))}","Seq":{step}'
            ),
        )
        if self.world_size > 1:
            yield from self._launch(
                t,
                ext,
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                self.rng.uniform(300, 900),
                stream=_COMM_STREAM,
                extra=(
                    f',"Collective name":"allreduce","In msg nelems":4194304,"Out msg nelems":4194304,'
                    f'"Group size":{self.world_size},"dtype":"Float"'
                ),
            )
        yield self._span(t, start, "record_param_comms", args)

    def step(self, n: int) -> Iterator[str]:
        """One training step: annotations, H2D copy, forward, backward with all-reduce, optimizer."""
        t = _MAIN_TID
        step_start = self._advance(t, self.rng.uniform(20, 60))
        step_ext, step_args = self._op(f"ProfilerStep#{n}", t, dims="[]")
        gpu_step_start = self.gpu_free[_COMPUTE_STREAM]
        # data loading: the step's CPU-only stretch (GPU idles here)
        dl_dur = self.rng.uniform(50, 400)
        dl_start = self._advance(t, dl_dur)
        _, dl_args = self._op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, dims="[]")
        dl_name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
        yield self._x("user_annotation", dl_name, t, dl_start, dl_dur - 0.5, dl_args)
        # H2D copy of the batch
        cp_start = self._advance(t, 1.0)
        cp_ext, cp_args = self._op("aten::copy_", t, dims="[[32, 1024], [32, 1024], []]")
        self.corr += 1
        ts = self._advance(t, 6.0)
        yield self._x("cuda_runtime", "cudaMemcpyAsync", t, ts, 5.0, f'"External id":{cp_ext},"cbid":51,"correlation":{self.corr}')
        g_ts = max(ts + 8.0, self.gpu_free[_COMPUTE_STREAM] + 1.0)
        self.gpu_free[_COMPUTE_STREAM] = g_ts + 12.0
        yield self._flow("s", self.corr, t, ts)
        yield self._flow("f", self.corr, _COMPUTE_STREAM, g_ts, pid=0)
        yield self._x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            _COMPUTE_STREAM,
            g_ts,
            12.0,
            f'"External id":{cp_ext},"device":0,"context":1,"stream":7,"correlation":{self.corr},"bytes":131072,"memory bandwidth (GB/s)":10.9',
            pid=0,
        )
        yield self._span(t, cp_start, "aten::copy_", cp_args)
        for layer in range(self.layers):
            yield from self._forward_layer(layer)
        # backward runs on the autograd thread, starting when the forward is done
        self.cpu[_BWD_TID] = max(self.cpu[_BWD_TID], self.cpu[t]) + 5.0
        bwd_start = self.cpu[_BWD_TID]
        _, bw_args = self._op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", _BWD_TID, dims="[]")
        for layer in reversed(range(self.layers)):
            yield from self._backward_layer(layer)
            if layer % _BUCKET == 0:
                yield from self._allreduce(n)
        yield self._span(_BWD_TID, bwd_start, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", bw_args)
        self.cpu[t] = max(self.cpu[t], self.cpu[_BWD_TID]) + 5.0
        # optimizer
        opt_start = self._advance(t, 2.0)
        _, opt_args = self._op("Optimizer.step#SGD.step", t, dims="[]")
        for _ in range(3):
            mt_start = self._advance(t, 1.0)
            mt_ext, mt_args = self._op("aten::_foreach_add_", t, dims="[[], []]")
            yield from self._launch(
                t,
                mt_ext,
                "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>>",
                self.rng.uniform(20, 80),
            )
            yield self._span(t, mt_start, "aten::_foreach_add_", mt_args)
        yield self._x("user_annotation", "Optimizer.step#SGD.step", t, opt_start, self.cpu[t] - opt_start + 1.0, opt_args)
        # the loss.item() sync: CPU waits for the GPU
        sync_ts = self._advance(t, 1.0)
        gpu_done = max(self.gpu_free.values())
        sync_dur = max(3.0, gpu_done - sync_ts + 2.0)
        self.corr += 1
        yield self._x("cuda_runtime", "cudaStreamSynchronize", t, sync_ts, sync_dur, f'"External id":{self.ext},"cbid":131,"correlation":{self.corr}')
        self.cpu[t] = sync_ts + sync_dur + 1.0
        yield self._x("user_annotation", f"ProfilerStep#{n}", t, step_start, self.cpu[t] - step_start, step_args)
        yield self._x(
            "gpu_user_annotation",
            f"ProfilerStep#{n}",
            _COMPUTE_STREAM,
            gpu_step_start,
            gpu_done - gpu_step_start,
            f'"External id":{step_ext}',
            pid=0,
        )


def _header(rank: int, world_size: int) -> str:
    head = {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA A100-SXM4-80GB",
                "totalGlobalMem": 85097971712,
                "computeMajor": 8,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "regsPerMultiprocessor": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "sharedMemPerMultiprocessor": 167936,
                "numSms": 108,
                "sharedMemPerBlockOptin": 166912,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size, "pg_count": 1},
        "record_shapes": 1,
        "with_stack": 0,
        "profile_memory": 0,
        "cuda_runtime_version": 12010,
        "cuda_driver_version": 12020,
        "trace_id": f"SYNTH{rank:04d}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000 - 1_700_000_000_000_000_000 % 10**9,
    }
    return json.dumps(head)[:-1] + ', "traceName": "synthetic", "traceEvents": [\n'


def _metadata(world_size: int) -> list[str]:
    return [
        f'{{"name":"process_name","ph":"M","ts":{_BASE_US:.3f},"pid":{_PID},"tid":0,"args":{{"name":"python"}}}}',
        f'{{"name":"thread_name","ph":"M","ts":{_BASE_US:.3f},"pid":{_PID},"tid":{_MAIN_TID},"args":{{"name":"python"}}}}',
        f'{{"name":"thread_name","ph":"M","ts":{_BASE_US:.3f},"pid":{_PID},"tid":{_BWD_TID},"args":{{"name":"pt_autograd_0"}}}}',
        f'{{"name":"process_name","ph":"M","ts":{_BASE_US:.3f},"pid":0,"tid":0,"args":{{"name":"python"}}}}',
        f'{{"name":"process_labels","ph":"M","ts":{_BASE_US:.3f},"pid":0,"tid":0,"args":{{"labels":"GPU 0"}}}}',
        f'{{"name":"thread_name","ph":"M","ts":{_BASE_US:.3f},"pid":0,"tid":{_COMPUTE_STREAM},"args":{{"name":"stream 7"}}}}',
        f'{{"name":"thread_name","ph":"M","ts":{_BASE_US:.3f},"pid":0,"tid":{_COMM_STREAM},"args":{{"name":"stream 20"}}}}',
    ]


def layers_for(events: int) -> int:
    """Layers per step so that ``_STEPS`` steps hold about ``events`` events."""
    per_layer = _EVENTS_PER_LAYER + 1 / _BUCKET
    return max(1, round((events / _STEPS - _EVENTS_PER_STEP_FIXED) / per_layer))


def generate(events: int, ranks: int, out_dir: Path, seed: int = 0, level: int = 6) -> tuple[list[Path], int]:
    """Write ``ranks`` files of about ``events`` events each into ``out_dir``; return paths, events/rank."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"rank{r}.pt.trace.json.gz" for r in range(ranks)]
    tmp = [p.with_suffix(".tmp") for p in paths]
    files = [gzip.open(t, "wt", compresslevel=level, encoding="utf-8") for t in tmp]
    gen = _Gen(seed, ranks, layers_for(events))
    try:
        for r, fh in enumerate(files):
            fh.write(_header(r, ranks))
            fh.write(",\n".join(_metadata(ranks)))
        for n in range(_STEPS):
            chunk = ",\n" + ",\n".join(gen.step(n + 1))
            for fh in files:
                fh.write(chunk)
        for fh in files:
            fh.write("\n]}\n")
    finally:
        for fh in files:
            fh.close()
    for t, p in zip(tmp, paths):
        t.replace(p)
    return paths, gen.count + len(_metadata(ranks))


def ensure(events: int, ranks: int, cache: Path | None = None) -> Path:
    """The folder (ranks > 1) or file (ranks == 1) of a synthetic trace, generated once and cached."""
    cache = cache or default_cache_dir()
    folder = cache / f"ev{events}_r{ranks}"
    done = folder / "DONE"
    if not done.exists():
        _, count = generate(events, ranks, folder)
        done.write_text(f"{count}\n")
    return folder if ranks > 1 else folder / "rank0.pt.trace.json.gz"


def event_count(events: int, ranks: int, cache: Path | None = None) -> int:
    """Events per rank actually written for a cached synthetic trace."""
    folder = (cache or default_cache_dir()) / f"ev{events}_r{ranks}"
    return int((folder / "DONE").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_300_000, help="events per rank (approximate)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="cache folder (default $TMPDIR/aiprof-bench-synth)")
    args = ap.parse_args()
    path = ensure(args.events, args.ranks, args.out)
    print(f"{path}\t{event_count(args.events, args.ranks, args.out)} events per rank")


if __name__ == "__main__":
    main()

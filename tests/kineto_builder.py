"""Build tiny Kineto (torch.profiler) traces from a few Python lines, for unit tests.

Times are given in microseconds, as Kineto writes them (floats with up to 3 decimals = ns). The builder
keeps them as exact int nanoseconds and writes them in the chosen schema::

    b = TraceBuilder()                                   # schema="new": baseTimeNanoseconds, float µs, ac2g
    step = b.step(0, ts=0, dur=100)                      # ProfilerStep#0 user_annotation
    op = b.cpu_op("aten::mm", ts=10, dur=20, shapes=[[4, 8], [8, 16]], dtypes=["float", "float"])
    rt, k = b.launch(op, kernel="sgemm", kernel_ts=35, kernel_dur=5.5, stream=7)
    b.memcpy(op, ts=40, dur=1, nbytes=4096)              # cudaMemcpyAsync + gpu_memcpy
    b.memory(ts=12, nbytes=2048, total_allocated=2048, device=0)
    b.distributed(rank=3, world_size=8)
    path = b.write(tmp_path / "trace.json.gz")           # .gz → gzip; bare=True → a bare JSON list

``TraceBuilder(schema="legacy")`` writes the 2020-21 shape instead: capitalised categories (``Operator``,
``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``), ``"stream 7"`` tids, absolute integer µs (the given times
plus ``legacy_origin_us``; they must be whole µs), ``external id``, ``Input dims``, ``async``/``launch``
flows, no ``baseTimeNanoseconds``.

Every method returns the event dict it appended (mutable: tests may break it on purpose), and
``b.ns(ev, "ts")`` gives the int ns the loader must produce for it. ``b.raw(...)`` appends any dict.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

Schema = Literal["new", "legacy"]
Event = dict[str, Any]

_CATS = {
    "new": {
        "cpu_op": "cpu_op",
        "annotation": "user_annotation",
        "step": "user_annotation",
        "runtime": "cuda_runtime",
        "driver": "cuda_driver",
        "kernel": "kernel",
        "memcpy": "gpu_memcpy",
        "memset": "gpu_memset",
        "gpu_annotation": "gpu_user_annotation",
        "flow": "ac2g",
    },
    "legacy": {
        "cpu_op": "Operator",
        "annotation": "Operator",
        "step": "Operator",
        "runtime": "Runtime",
        "driver": "Runtime",
        "kernel": "Kernel",
        "memcpy": "Memcpy",
        "memset": "Memset",
        "gpu_annotation": "gpu_user_annotation",
        "flow": "async",
    },
}


def _ns(us: float | int | str | Decimal) -> int:
    """µs → exact int ns (through Decimal, so 0.001 µs is exactly 1 ns)."""
    return int((Decimal(str(us)) * 1000).to_integral_value())


class _Micros(float):
    """A float µs value that serialises as its exact decimal text (``123.456``), never ``123.45600000001``."""

    text: str

    def __new__(cls, ns: int) -> _Micros:
        sign = "-" if ns < 0 else ""
        whole, frac = divmod(abs(ns), 1000)
        text = f"{sign}{whole}.{frac:03d}"
        obj = super().__new__(cls, float(text))
        obj.text = text
        return obj

    def __repr__(self) -> str:
        return self.text


class TraceBuilder:
    """A Kineto trace under construction. See the module docstring for the API in one screen."""

    def __init__(
        self,
        schema: Schema = "new",
        *,
        pid: int = 4242,
        tid: int = 4242,
        base_time_ns: int = 1_700_000_000_000_000_000,
        legacy_origin_us: int = 1_623_142_623_000_000,
        devices: int = 1,
        device_name: str = "NVIDIA H100 80GB HBM3",
    ) -> None:
        if schema not in ("new", "legacy"):
            raise ValueError(f"schema must be 'new' or 'legacy', not {schema!r}")
        self.schema: Schema = schema
        self.pid, self.tid = pid, tid
        self.base_time_ns = base_time_ns
        self.legacy_origin_us = legacy_origin_us
        self.events: list[Event] = []
        self.header: dict[str, Any] = {"schemaVersion": 1}
        self._next_external = 1
        self._next_correlation = 1000
        self._next_python = 1
        self._device_props = [self.device_properties(i, device_name) for i in range(devices)]

    # ----- time -----------------------------------------------------------------------------------
    def _time(self, us: float | int | str) -> float | int:
        ns = _ns(us)
        if self.schema == "legacy":
            if ns % 1000:
                raise ValueError(f"legacy traces hold whole µs; {us} is not")
            return self.legacy_origin_us + ns // 1000
        return _Micros(ns)

    def ns(self, event: Event, key: str = "ts") -> int:
        """The int ns the loader must give ``event[key]`` (legacy: absolute µs·1000)."""
        value = event[key]
        text = value.text if isinstance(value, _Micros) else repr(value)
        return _ns(text)

    # ----- CPU side -------------------------------------------------------------------------------
    def raw(self, event: Event) -> Event:
        """Append any event dict as given (for malformed-input tests)."""
        self.events.append(event)
        return event

    def _span(self, kind: str, name: str, ts: float, dur: float, pid: Any, tid: Any, args: dict[str, Any]) -> Event:
        ev: Event = {"ph": "X", "cat": _CATS[self.schema][kind], "name": name, "pid": pid, "tid": tid}
        ev["ts"], ev["dur"] = self._time(ts), self._duration(dur)
        ev["args"] = args
        self.events.append(ev)
        return ev

    def _duration(self, dur: float | int) -> float | int:
        ns = _ns(dur)
        if self.schema == "legacy":
            if ns % 1000:
                raise ValueError(f"legacy traces hold whole µs; {dur} is not")
            return ns // 1000
        return _Micros(ns)

    def _cpu_tid(self, tid: int | None) -> int | str:
        value = self.tid if tid is None else tid
        return str(value) if self.schema == "legacy" else value

    def _external(self, external_id: int | None) -> int:
        if external_id is None:
            external_id = self._next_external
            self._next_external += 1
        return external_id

    def cpu_op(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        shapes: list[Any] | None = None,
        dtypes: list[str] | None = None,
        concrete: list[Any] | None = None,
        seq: int | None = None,
        fwd_tid: int | None = None,
        external_id: int | None = None,
        tid: int | None = None,
        args: dict[str, Any] | None = None,
    ) -> Event:
        """An aten op (``cpu_op``; legacy ``Operator``) with its own External id."""
        a: dict[str, Any] = {"External id": self._external(external_id)}
        if seq is not None:
            a["Sequence number"] = seq
            a["Fwd thread id"] = 0 if fwd_tid is None else fwd_tid
        if shapes is not None:
            a["Input dims" if self.schema == "legacy" else "Input Dims"] = shapes
            a["Input type"] = dtypes if dtypes is not None else ["float"] * len(shapes)
            if self.schema == "new":
                a["Concrete Inputs"] = concrete if concrete is not None else [""] * len(shapes)
        a.update(args or {})
        return self._span("cpu_op", name, ts, dur, self.pid, self._cpu_tid(tid), a)

    def annotation(self, name: str, ts: float, dur: float, *, tid: int | None = None) -> Event:
        """A ``record_function`` range (``user_annotation``; legacy ``Operator``)."""
        a = {"External id": self._external(None)}
        return self._span("annotation", name, ts, dur, self.pid, self._cpu_tid(tid), a)

    def step(self, n: int, ts: float, dur: float, *, tid: int | None = None) -> Event:
        """``ProfilerStep#n``."""
        return self.annotation(f"ProfilerStep#{n}", ts, dur, tid=tid)

    def dataloader(self, ts: float, dur: float, *, tid: int | None = None) -> Event:
        """The DataLoader ``__next__`` annotation torch adds around every batch fetch."""
        return self.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, dur, tid=tid)

    def python(
        self, name: str, ts: float, dur: float, *, parent: Event | None = None, module_id: int | None = None
    ) -> Event:
        """A ``python_function`` event (with_stack); ``parent`` is another python event."""
        a: dict[str, Any] = {"Python id": self._next_python, "Python thread": 0}
        self._next_python += 1
        if parent is not None:
            a["Python parent id"] = parent["args"]["Python id"]
        if module_id is not None:
            a["Python module id"] = module_id
        ev: Event = {"ph": "X", "cat": "python_function", "name": name, "pid": self.pid}
        ev.update(tid=self._cpu_tid(None), ts=self._time(ts), dur=self._duration(dur), args=a)
        self.events.append(ev)
        return ev

    def runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        correlation: int | None = None,
        external_id: int | None = None,
        driver: bool = False,
        tid: int | None = None,
    ) -> Event:
        """A runtime (or driver) call on the CPU thread, e.g. ``cudaStreamSynchronize``."""
        a: dict[str, Any] = {"cbid": 211, "correlation": self._correlation(correlation)}
        if external_id is not None:
            a["external id" if self.schema == "legacy" else "External id"] = external_id
        return self._span("driver" if driver else "runtime", name, ts, dur, self.pid, self._cpu_tid(tid), a)

    def _correlation(self, correlation: int | None) -> int:
        if correlation is None:
            correlation = self._next_correlation
            self._next_correlation += 1
        return correlation

    # ----- device side ----------------------------------------------------------------------------
    def _gpu(
        self, kind: str, name: str, ts: float, dur: float, device: int, stream: int, args: dict[str, Any]
    ) -> Event:
        tid: int | str = f"stream {stream}" if self.schema == "legacy" else stream
        base = {"device": device, "context": 1, "stream": stream}
        return self._span(kind, name, ts, dur, device, tid, {**base, **args})

    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        stream: int = 7,
        device: int = 0,
        correlation: int | None = None,
        external_id: int | None = None,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        registers: int = 32,
        args: dict[str, Any] | None = None,
    ) -> Event:
        """A GPU kernel on ``device``/``stream`` (no launch; see :meth:`launch`)."""
        a: dict[str, Any] = {"queued": 0, "correlation": self._correlation(correlation)}
        if external_id is not None:
            a["external id" if self.schema == "legacy" else "External id"] = external_id
        a.update({"registers per thread": registers, "shared memory": 0, "blocks per SM": 0.5})
        a.update({"warps per SM": 2.0, "grid": list(grid), "block": list(block), "est. achieved occupancy %": 12})
        a.update(args or {})
        return self._gpu("kernel", name, ts, dur, device, stream, a)

    def launch(
        self,
        op: Event | None,
        *,
        kernel: str = "sgemm_128x64_nn",
        kernel_ts: float,
        kernel_dur: float,
        ts: float | None = None,
        dur: float = 2,
        stream: int = 7,
        device: int = 0,
        kind: Literal["kernel", "memcpy", "memset"] = "kernel",
        nbytes: int = 0,
        flow: bool = True,
        api: str | None = None,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
    ) -> tuple[Event, Event]:
        """A launch inside ``op`` (External id copied; at ``op.ts`` + 1 µs unless ``ts`` is given) and the
        GPU activity it started, linked by a fresh correlation id and, with ``flow``, an ac2g/async flow."""
        ext = None if op is None else int(op["args"]["External id"])
        start = ts if ts is not None else (self._relative_us(op) + 1 if op is not None else 0)
        corr = self._correlation(None)
        names = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}
        rt = self.runtime(api or names[kind], start, dur, correlation=corr, external_id=ext)
        if kind == "kernel":
            gpu = self.kernel(
                kernel, kernel_ts, kernel_dur, stream=stream, device=device, correlation=corr, external_id=ext,
                grid=grid, block=block,
            )
        else:
            extra: dict[str, Any] = {"correlation": corr, "bytes": nbytes, "memory bandwidth (GB/s)": 1.0}
            if ext is not None:
                extra["external id" if self.schema == "legacy" else "External id"] = ext
            gpu = self._gpu(kind, kernel, kernel_ts, kernel_dur, device, stream, extra)
        if flow:
            self._flow(corr, rt, gpu)
        return rt, gpu

    def memcpy(self, op: Event | None, *, ts: float, dur: float, nbytes: int, stream: int = 7, **kw: Any) -> Event:
        """A ``cudaMemcpyAsync`` inside ``op`` and its ``Memcpy HtoD`` activity."""
        return self.launch(
            op, kernel="Memcpy HtoD (Pageable -> Device)", kernel_ts=ts, kernel_dur=dur, kind="memcpy",
            nbytes=nbytes, stream=stream, **kw,
        )[1]

    def memset(self, op: Event | None, *, ts: float, dur: float, nbytes: int, stream: int = 7, **kw: Any) -> Event:
        """A ``cudaMemsetAsync`` inside ``op`` and its ``Memset (Device)`` activity."""
        return self.launch(
            op, kernel="Memset (Device)", kernel_ts=ts, kernel_dur=dur, kind="memset", nbytes=nbytes,
            stream=stream, **kw,
        )[1]

    def gpu_annotation(self, name: str, ts: float, dur: float, *, external_id: int, stream: int = 7) -> Event:
        """The device-side copy of a record_function range (``gpu_user_annotation``)."""
        return self._gpu("gpu_annotation", name, ts, dur, 0, stream, {"External id": external_id})

    def _relative_us(self, event: Event) -> Decimal:
        ns = self.ns(event)
        if self.schema == "legacy":
            ns -= self.legacy_origin_us * 1000
        return Decimal(ns) / 1000

    def _flow(self, corr: int, start: Event, end: Event) -> None:
        cat = _CATS[self.schema]["flow"]
        name = "launch" if self.schema == "legacy" else "ac2g"
        self.events.append({"ph": "s", "id": corr, "pid": start["pid"], "tid": start["tid"], "ts": start["ts"],
                            "cat": cat, "name": name})
        self.events.append({"ph": "f", "id": corr, "pid": end["pid"], "tid": end["tid"], "ts": end["ts"],
                            "cat": cat, "name": name, "bp": "e"})

    # ----- instants and metadata --------------------------------------------------------------------
    def memory(
        self,
        ts: float,
        nbytes: int,
        *,
        total_allocated: int = 0,
        total_reserved: int = 0,
        device: int = -1,
        addr: int = 94_000_000_000_000,
    ) -> Event:
        """A ``[memory]`` instant (profile_memory); ``device=-1`` is the CPU, negative bytes a free."""
        a = {
            "Total Reserved": total_reserved, "Total Allocated": total_allocated, "Bytes": nbytes,
            "Device Id": device, "Device Type": 0 if device < 0 else 1, "Addr": addr,
        }
        ev: Event = {"ph": "i", "s": "t", "name": "[memory]", "pid": self.pid, "tid": self._cpu_tid(None)}
        if self.schema == "new":
            ev["cat"] = "cpu_instant_event"
        ev.update(ts=self._time(ts), args=a)
        self.events.append(ev)
        return ev

    def distributed(self, rank: int, world_size: int, backend: str = "nccl") -> None:
        """Write ``distributedInfo`` (how aiprof numbers ranks first)."""
        self.header["distributedInfo"] = {
            "backend": backend, "rank": rank, "world_size": world_size, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world_size,
                           "ranks": list(range(world_size))}],
        }

    @staticmethod
    def device_properties(index: int, name: str) -> dict[str, Any]:
        return {
            "id": index, "name": name, "totalGlobalMem": 85_520_809_984, "computeMajor": 9, "computeMinor": 0,
            "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
            "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
            "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448,
        }

    def metadata_events(self) -> list[Event]:
        """``M`` events naming the CPU process/thread and each device's process."""
        events = [e for e in self.events if isinstance(e, dict)]
        pids = {self.pid} | {e["pid"] for e in events if e.get("cat") in ("kernel", "Kernel")}
        out: list[Event] = []
        for pid in sorted(p for p in pids if isinstance(p, int)):
            label = "python3" if pid == self.pid else f"GPU {pid}"
            out.append({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": label}})
        out.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": self.tid,
                    "args": {"name": "thread 1 (python3)"}})
        return out

    # ----- output ---------------------------------------------------------------------------------
    def to_json(self, *, bare: bool = False, metadata: bool = True) -> Any:
        """The trace as JSON-able data: an object with ``traceEvents`` (or, with ``bare``, the list)."""
        events = self.events + (self.metadata_events() if metadata else [])
        if bare:
            return events
        doc: dict[str, Any] = dict(self.header)
        if self.schema == "new":
            doc["deviceProperties"] = self._device_props
            doc["displayTimeUnit"] = "ms"
            doc["baseTimeNanoseconds"] = self.base_time_ns
        elif self._device_props:
            doc["deviceProperties"] = self._device_props
        doc["traceEvents"] = events
        return doc

    def dumps(self, *, bare: bool = False, metadata: bool = True) -> str:
        """The JSON text, with every µs float written as its exact decimal."""
        return _encode(self.to_json(bare=bare, metadata=metadata))

    def write(self, path: str | Path, *, bare: bool = False, metadata: bool = True) -> Path:
        """Write the trace; gzip when ``path`` ends in ``.gz``. Returns the path."""
        path = Path(path)
        data = self.dumps(bare=bare, metadata=metadata).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def _encode(value: Any) -> str:
    """JSON text where :class:`_Micros` keep their exact text (json.dumps would write repr(float))."""
    if isinstance(value, _Micros):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    return json.dumps(value)

"""Decoding one file with helper processes gives exactly the trace one process builds."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from kineto_builder import TraceBuilder
from trace_compare import identical

from aiprof.trace import cores
from aiprof.trace.kineto import loader, parallel, source, stream
from aiprof.trace.runset import map_files


def busy_trace(tmp_path: Path) -> Path:
    """Many steps, shapes, kernels, memory events, flows, and string pids/tids (legacy "Spans")."""
    b = TraceBuilder()
    b.device_properties(0, "NVIDIA H100 80GB HBM3")
    for step in range(60):
        t = step * 1000
        b.step(step, ts=t, dur=1000)
        for k in range(4):
            op = b.cpu_op(f"aten::op{(step * 7 + k) % 23}", ts=t + 10 + k * 200, dur=150,
                          shapes=[[step % 5 + 1, 8], [8, 16 + k]])
            b.launch(op, kernel_ts=t + 50 + k * 200, kernel_dur=90)
        b.memory(ts=t + 5, nbytes=1024 * step, total_allocated=4096 + step, device=0)
    data: dict[str, Any] = json.loads(b.dumps())
    events = data["traceEvents"]
    for step in range(60):
        t = step * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"span{step % 3}", "pid": "Spans",
                       "tid": f"Thread {step % 4}", "ts": t + 1, "dur": 3})
        events.append({"ph": "M", "name": "thread_name", "pid": "Spans", "tid": f"Thread {step % 4}",
                       "args": {"name": f"worker {step % 4}"}})
        # flows whose ids or pids are strings in some runs (kept as lists by a helper) and ints in others
        flow_id: int | str = f"f{step}" if step % 7 == 0 else 10_000 + step
        flow_pid: int | str = "Spans" if step % 5 == 0 else 1
        for ph in ("s", "f"):
            events.append({"ph": ph, "cat": "fwdbwd", "name": "fwdbwd", "id": flow_id, "pid": flow_pid,
                           "tid": 7, "ts": t + (2 if ph == "s" else 900), "bp": "e"})
    events.append({"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "args": {"name": "Traces"}})
    path = tmp_path / "busy.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data, indent=1).encode()))
    return path


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("chunk", [2048, 20000])
def test_helpers_build_the_same_trace_as_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, chunk: int
) -> None:
    path = busy_trace(tmp_path)
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(source, "PIECE_BYTES", max(chunk // 3, 64))
    serial = stream.stream_load(path, workers=0)
    shared = stream.stream_load(path, workers=workers)
    assert serial is not None and shared is not None
    assert "Spans" in "".join(serial.strings) and serial.thread_names  # the string pids were exercised
    assert (serial.flows.flow_id < 0).any() and (serial.flows.flow_id > 10_000).any()  # both kinds of id
    identical(shared, serial)


def test_a_failing_helper_falls_back_to_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = busy_trace(tmp_path)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(source, "PIECE_BYTES", 1024)

    def broken(conn: Any, path: Path) -> None:
        raise SystemExit(3)  # the helper dies without a word

    monkeypatch.setattr(parallel, "_helper_main", broken)
    assert stream.stream_load(path, workers=2) is None  # the caller then takes the whole-file path
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "2")
    loaded = loader.load_file(path)
    monkeypatch.undo()
    serial = stream.stream_load(path, workers=0)
    assert serial is not None
    identical(loaded, serial)


def test_helper_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "0")
    assert cores.worker_count() == 0
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "2")
    assert cores.worker_count() == (2 if "fork" in multiprocessing.get_all_start_methods() else 0)
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "many")
    assert cores.worker_count() == 0
    monkeypatch.delenv("AIPROF_DECODE_WORKERS")
    assert 0 <= cores.worker_count() <= cores.MAX_WORKERS
    monkeypatch.setattr(multiprocessing.current_process(), "_config", {"daemon": True})
    assert cores.worker_count() == 0  # inside a daemonic process: its owner manages the cores


def _helpers_here(job: tuple[Path]) -> int:
    return cores.worker_count()


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="helpers need fork")
def test_pool_workers_share_the_cores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The workers of the several-files pool (not daemonic since Python 3.9) split the cores between
    them: with as many files in flight as cores, none of them forks decode helpers."""
    monkeypatch.delenv("AIPROF_DECODE_WORKERS", raising=False)
    jobs = [(tmp_path / f"rank{i}.json",) for i in range(2)]
    share = cores.usable_cores() // 2
    expected = max(0, min(share - 1, cores.MAX_WORKERS))
    assert map_files(_helpers_here, jobs, 2, None) == [expected, expected]
    for workers in (3, 8):  # more workers than cores: one core each, no helpers
        many = [(tmp_path / f"rank{i}.json",) for i in range(workers)]
        if cores.usable_cores() <= workers:
            assert set(map_files(_helpers_here, many, workers, None)) == {0}


@pytest.mark.parametrize("runs", [0, 2, 1000])
def test_a_primed_load_is_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: int) -> None:
    """prime() hands the first runs to the helpers; the later load continues it (1000: the whole file is
    dealt while priming)."""
    path = busy_trace(tmp_path)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(source, "PIECE_BYTES", 2048)
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "1")
    serial = stream.stream_load(path, workers=0)
    stream.prime(path, runs)
    assert (str(path.resolve()) in stream._primed) == (runs > 0)
    primed = stream.stream_load(path)
    assert not stream._primed
    assert serial is not None and primed is not None
    identical(primed, serial)


def test_an_interrupt_while_receiving_results_does_not_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the reader takes a helper's state: the helper, blocked writing the rest into a full
    pipe, is killed, not waited for (which would wait forever)."""
    path = busy_trace(tmp_path)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(source, "PIECE_BYTES", 1024)
    monkeypatch.setattr(parallel, "PIPE_BYTES", 4096)  # the state does not fit: the helper blocks writing
    started: list[parallel.Helpers] = []
    real_init = parallel.Helpers.__init__

    def recording_init(self: parallel.Helpers, path: Path, count: int) -> None:
        real_init(self, path, count)
        started.append(self)

    calls = 0
    real_receive = parallel._receive

    def interrupted_receive(fd: int) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # after the state's header, before its pieces
            raise KeyboardInterrupt
        return real_receive(fd)

    monkeypatch.setattr(parallel.Helpers, "__init__", recording_init)
    monkeypatch.setattr(parallel, "_receive", interrupted_receive)
    raised: list[BaseException] = []

    def load() -> None:
        try:
            stream.stream_load(path, workers=1)
        except BaseException as err:  # noqa: BLE001 - checked below
            raised.append(err)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # hung: unblock it before failing
        for helper in started[0].helpers:
            os.kill(helper.pid, signal.SIGKILL)
        worker.join(timeout=30)
        pytest.fail("closing the helpers waited for one that could never finish")
    assert len(raised) == 1 and isinstance(raised[0], KeyboardInterrupt)
    for helper in started[0].helpers:
        with pytest.raises(ChildProcessError):  # reaped
            os.waitpid(helper.pid, os.WNOHANG)


def test_discarding_a_primed_load_stops_its_helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A primed load that no load takes over (the command failed or was interrupted first): its helpers
    are killed and reaped, none is left running or as a zombie."""
    path = busy_trace(tmp_path)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(source, "PIECE_BYTES", 2048)
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "2")
    stream.prime(path, 2)
    helpers = stream._primed[str(path.resolve())].helpers
    assert helpers is not None
    pids = [helper.pid for helper in helpers.helpers]
    assert len(pids) == 2
    stream.discard_primed()
    assert not stream._primed
    for pid in pids:
        with pytest.raises(ChildProcessError):  # already reaped: no longer this process's child
            os.waitpid(pid, os.WNOHANG)
    stream.discard_primed()  # nothing left: a no-op


def test_priming_an_unusual_file_leaves_it_to_the_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "1")
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}] * 5000))
    stream.prime(bare)
    assert not stream._primed  # a bare list is the whole-file path's
    assert loader.load_file(bare).event_count == 5000

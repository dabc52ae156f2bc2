"""Part of an analysis computed in a forked child comes back intact, and any failure of the child is
reported as None so that the caller computes that part itself."""

from __future__ import annotations

import os

import pytest

from aiprof.analysis import forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


@pytest.fixture(autouse=True)
def spare_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "1")  # as on a machine with a spare core


def test_the_childs_result_comes_back() -> None:
    big = list(range(300_000))  # more than a pipe holds: the parent reads while the child writes
    pending = forked.start(lambda: {"sum": sum(big), "rows": big})
    assert pending is not None
    assert pending.result() == {"sum": sum(big), "rows": big}


def test_a_failing_computation_gives_none() -> None:
    def fails() -> int:
        raise ValueError("a bug in a section")

    pending = forked.start(fails)
    assert pending is not None and pending.result() is None


def test_a_child_that_dies_gives_none() -> None:
    pending = forked.start(lambda: os._exit(3))
    assert pending is not None and pending.result() is None


def test_an_abandoned_child_is_reaped() -> None:
    import time

    pending = forked.start(lambda: time.sleep(30))
    assert pending is not None
    pid = pending.pid
    pending.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already killed and reaped: no zombie left


def test_no_fork_without_a_spare_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPROF_DECODE_WORKERS", "0")
    assert forked.start(lambda: 1) is None

"""Ctrl-C held back around a fork: delivered when the block ends, never inside it; children ignore it."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from aiprof.interrupts import ignore_in_child, interrupts_held


def test_an_interrupt_in_the_block_is_delivered_when_it_ends() -> None:
    reached_end = False
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            reached_end = True  # the interrupt did not stop the block
    assert reached_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back


def test_the_handler_in_place_is_the_one_called() -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            assert not calls
        assert calls == [signal.SIGINT]  # acted on once, after the block
        with interrupts_held():
            pass
        assert calls == [signal.SIGINT]  # nothing held: nothing done
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_interrupt_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_mask_is_restored_when_the_block_raises() -> None:
    with pytest.raises(ValueError):
        with interrupts_held():
            raise ValueError
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_in_the_block_ignores_interrupts() -> None:
    read_fd, write_fd = os.pipe()
    with interrupts_held():
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ignore_in_child()
                os.kill(os.getpid(), signal.SIGINT)  # ignored: the child carries on
                os.write(write_fd, b"ok")
                code = 0
            finally:
                os._exit(code)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    assert os.read(read_fd, 16) == b"ok"
    os.close(read_fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the parent's is back


def test_outside_the_main_thread_nothing_is_swapped() -> None:
    """signal.signal may only be called from the main thread: elsewhere the block just runs."""
    ran: list[bool] = []

    def work() -> None:
        with interrupts_held():
            ran.append(True)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert ran == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

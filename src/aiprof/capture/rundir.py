"""Moved to :mod:`aiprof.rundir` (the run directory has one owner, below every layer); this name stays
for the capture modules that import it."""

from __future__ import annotations

from aiprof.rundir import *  # noqa: F403
from aiprof.rundir import (  # noqa: F401 - explicit for mypy: the capture modules use these names
    CLAIM,
    LOCK,
    RESERVE,
    META,
    PART_SUFFIX,
    TELEMETRY,
    TRACE_SUFFIX,
    RawMeta,
    RunDirError,
    atomic_write,
    check_writable,
    create_new,
    cut_cycle_message,
    dataloader_path,
    dynamo_path,
    default_run_dir,
    is_disk_full,
    leftover_cycles,
    locked,
    part_path,
    parts_of,
    read_meta,
    record_failure,
    release_reserve,
    reserve_space,
    format_requests,
    requests_path,
    trace_path,
    update_meta,
    write_failed,
)

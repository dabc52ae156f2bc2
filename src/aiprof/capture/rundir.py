"""Moved to :mod:`aiprof.rundir` (the run directory has one owner, below every layer); this name stays
for the capture modules that import it."""

from __future__ import annotations

from aiprof.rundir import *  # noqa: F403
from aiprof.rundir import (  # noqa: F401 - explicit for mypy: the capture modules use these names
    CLAIM,
    LOCK,
    META,
    PART_SUFFIX,
    TELEMETRY,
    TRACE_SUFFIX,
    RawMeta,
    RunDirError,
    atomic_write,
    check_writable,
    create_new,
    dataloader_path,
    dynamo_path,
    default_run_dir,
    locked,
    part_path,
    parts_of,
    read_meta,
    record_failure,
    format_requests,
    requests_path,
    trace_path,
    update_meta,
)

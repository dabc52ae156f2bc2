"""Planted-bottleneck training workloads: small PyTorch programs with one known problem each, and a
switch (``fixed=True``) that applies the fix aiprof recommends for it.

They serve three jobs: the test suite checks that the planted problem is the top finding, that the
estimated saving is close to the saving measured after applying the fix, and ``aiprof demo`` profiles
the data-loading one, applies the fix and shows the difference. They run on the CPU in seconds (a GPU
is used when present and asked for). torch is imported inside the functions only.
"""

from __future__ import annotations

from aiprof.workloads import isolated
from aiprof.workloads import planted as _planted  # noqa: F401  (registers the workloads)
from aiprof.workloads.base import (
    WORKLOADS,
    Workload,
    measure_saving_ns,
    measure_step_ns,
    profile_workload,
    profiler_ns_per_op,
)

__all__ = [
    "WORKLOADS",
    "Workload",
    "isolated",
    "measure_saving_ns",
    "measure_step_ns",
    "profile_workload",
    "profiler_ns_per_op",
]

"""Communication: which kernels are collectives, what each collective moved, and how much of it compute hid.

A kernel is *communication* when its name belongs to a collective-library family (NCCL, RCCL, MSCCL:
``nccl*``, ``ncclDevKernel_*``, ``ncclKernel_*``, ``rccl*``, ``msccl*``), when it is a known custom
collective kernel (``*all_to_all*`` / ``*alltoall*``, symmetric-memory ``multimem_all_reduce``,
one/two-shot all-reduce, vLLM's ``cross_device_reduce``, DeepEP), or when Kineto attached collective
metadata (``Collective name``) to it. Kernels merely launched *inside* a ``c10d::*`` op (copies into a flat
buffer, casts) are compute: the TensorBoard plugin counts them as communication, we do not.
"""

from __future__ import annotations

import re

import numpy as np

from aiprof.trace.model import Bool, Kind, Trace

# Searched, case-insensitive. Library prefixes must start a word (``void ncclKernel_…`` and
# ``ncclDevKernel_Generic`` match; ``foo_nccl_like`` would too, which is what we want).
COMM_KERNEL_PATTERN = (
    r"(?i)(?<![a-z0-9])(nccl|rccl|msccl)"
    r"|all_?to_?all"
    r"|multimem_all_reduce|one_?shot_all_?reduce|two_?shot_all_?reduce|allreduce_fusion"
    r"|cross_device_reduce"
    r"|deep_ep::"
)


def _comm_name_ids(trace: Trace) -> Bool:
    """For every string id, whether that name is a communication-kernel name (cached per trace)."""
    cached = trace.cache.get("comm.name_ids")
    if cached is None:
        regex = re.compile(COMM_KERNEL_PATTERN)
        cached = np.fromiter((bool(regex.search(s)) for s in trace.strings), dtype=bool, count=len(trace.strings))
        trace.cache["comm.name_ids"] = cached
    return cached


def is_comm_kernel(trace: Trace) -> Bool:
    """Row mask: True for kernel rows that are communication (collectives, send/recv, all-to-all).

    Vectorised: one regex test per distinct string, then a lookup per row; kernels that carry Kineto's
    collective metadata count too, whatever their name.
    """
    c = trace.columns
    mask = np.zeros(len(c), dtype=bool)
    kernels = c.kind == int(Kind.KERNEL)
    names = _comm_name_ids(trace)
    if names.size:
        mask[kernels] = names[c.name[kernels]]
    meta_rows = trace.comm_args_raw.rows
    if meta_rows.size:
        meta_rows = meta_rows[(meta_rows >= 0) & (meta_rows < len(c))]
        mask[meta_rows[kernels[meta_rows]]] = True
    return mask

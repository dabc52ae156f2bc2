"""Build small allocator snapshots (the dict torch's ``_snapshot()`` returns) for tests and the benchmark."""

from __future__ import annotations

from typing import Any

FRAME_USER = {"filename": "/home/u/train.py", "line": 10, "name": "forward"}
FRAME_LIB = {"filename": "/usr/lib/python3/site-packages/torch/nn/modules/module.py", "line": 1750, "name": "_call_impl"}


def block(addr: int, size: int, state: str = "active_allocated", requested: int | None = None) -> dict[str, Any]:
    return {"address": addr, "size": size, "requested_size": size if requested is None else requested,
            "state": state, "frames": []}


def segment(addr: int, blocks: list[dict[str, Any]], device: int = 0) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": device, "address": addr, "total_size": total, "allocated_size": active, "active_size": active,
            "requested_size": active, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks}


def entry(action: str, addr: int, size: int, t_us: int, frames: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t_us,
            "frames": [FRAME_USER, FRAME_LIB] if frames is None else frames, "compile_context": "N/A",
            "user_metadata": "", **extra}


def snapshot(segments: list[dict[str, Any]], trace: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False, **settings},
            "external_annotations": []}

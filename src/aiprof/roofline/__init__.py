"""Roofline analysis: FLOPs and bytes of every op from its recorded shapes, device peaks, and whether each
op is compute-, memory- or latency-bound. Pure Python: only ``aiprof peaks`` (and tests) import torch."""

from __future__ import annotations

from aiprof.roofline.cost import OpCost, is_modelled_name, op_cost

__all__ = ["OpCost", "is_modelled_name", "op_cost"]

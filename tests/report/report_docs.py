"""Report documents of real traces, built once per session with the same pipeline as `aiprof analyze`."""

from __future__ import annotations

import functools
import json
import importlib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from aiprof.report.model import Report

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"

# Real traces every renderer is tested on: single-GPU training with a DataLoader stall, 8 ranks with
# NCCL, a CPU-only trace, an AMD MI300X DDP trace and the 8-rank Megatron TP run.
REAL = {
    "resnet50_nw0": "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "resnet50_nw4": "kineto-tbplugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "dlrm_8rank": "param/dlrm_8rank",
    "cpu_only": "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "mi300_resnet": "tracelens/mi300/resnet_act_checkpoint.json.gz",
    "megatron_tp8": "astra-sim/megatron_tp8",
}
RENDERED = ("resnet50_nw0", "dlrm_8rank", "cpu_only", "mi300_resnet")


def shared_path(key: str) -> Path:
    path = SHARED / REAL[key]
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/traces)")
    return path


@functools.cache
def document_of(key: str) -> Report:
    """The report document of a real trace, findings included when the diagnosis layer is installed."""
    return document_for_paths((str(shared_path(key)),))


def document_for_paths(paths: tuple[str, ...]) -> Report:
    """What `aiprof analyze` builds for ``paths``: analysis, diagnosis, the typed report."""
    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.report.document import build_document

    return build_document(*analyze_and_diagnose(list(paths)))


def as_dict(doc: Report) -> dict[str, Any]:
    """The report as the JSON file holds it (plain dicts and lists), to edit in a test."""
    from aiprof.report.json_report import encode

    return json.loads(encode(doc))  # type: ignore[no-any-return]


def as_report(data: dict[str, Any]) -> Report:
    """An edited plain report back as the typed report (validated, as a JSON report file is read)."""
    return msgspec.convert(data, Report)


@pytest.fixture(params=RENDERED)
def real_doc(request: pytest.FixtureRequest) -> Report:
    return document_of(request.param)


def has_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True

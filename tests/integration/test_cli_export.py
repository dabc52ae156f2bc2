"""`aiprof export` copies only what it knows of the inputs' top-level fields (public traces carry tokens in
their free-form ``metadata`` blocks), and writes through a fresh temporary file a planted symlink cannot
redirect."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from kineto_builder import TraceBuilder

from aiprof.app import trace_header
from aiprof.cli import main

SECRETS = ("hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "sk-proj-" + "0123456789abcdef", "hunter2-password",
           "AKIA" + "IOSFODNN7EXAMPLE", "wandb-api-key-99")


def planted_trace(path: Path) -> Path:
    b = TraceBuilder()
    for i in range(3):
        b.step(i, ts=i * 1000, dur=900)
        op = b.cpu_op("aten::mm", ts=i * 1000 + 10, dur=100, shapes=[[64, 64], [64, 64]])
        b.launch(op, kernel_ts=i * 1000 + 150, kernel_dur=300)
    b.distributed(rank=0, world_size=1)
    b.header["distributedInfo"]["MASTER_ADDR"] = "10.0.0.1"
    b.header["distributedInfo"]["backend"] = "HF_TOKEN=" + SECRETS[0]  # a known key with an env-like value
    b.header["metadata"] = {"env": {"HF_TOKEN": SECRETS[0], "OPENAI_API_KEY": SECRETS[1]}, "cmd": "--password hunter2"}
    b.header["INFO"] = {"password": SECRETS[2]}
    b.header["username"] = "alice"
    b.header["trace_id"] = "run at https://user:" + SECRETS[2] + "@example.com"
    b.header["cuda_driver_version"] = 12040
    b.header["aws_key"] = SECRETS[3]
    b.header["with_stack"] = {"WANDB_API_KEY": SECRETS[4]}  # a known key holding a block, not a flag
    b._device_props[0]["env"] = {"HF_TOKEN": SECRETS[0]}
    return b.write(path)


def merged(out: Path) -> tuple[bytes, dict[str, Any]]:
    data = out.read_bytes()
    if out.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data, json.loads(data)


@pytest.mark.parametrize("name", ["merged.json", "merged.json.gz"])
def test_export_copies_no_secret_of_the_input(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    trace = planted_trace(tmp_path / "trace.json")
    out = tmp_path / name
    assert main(["export", str(trace), "-o", str(out)]) == 0, capsys.readouterr().err
    data, doc = merged(out)
    for secret in (*SECRETS, "alice", "MASTER_ADDR", "10.0.0.1", "HF_TOKEN"):
        assert secret.encode() not in data, secret
    assert not {"metadata", "INFO", "username", "aws_key", "with_stack"} & set(doc)
    assert doc["schemaVersion"] == 1 and doc["cuda_driver_version"] == 12040
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3" and "env" not in doc["deviceProperties"][0]
    assert doc["distributedInfo"] == {"rank": 0, "world_size": 1, "pg_count": 1}
    assert len([e for e in doc["traceEvents"] if e.get("cat") == "kernel"]) == 3


def test_the_header_allow_list() -> None:
    raw = {"schemaVersion": 1, "displayTimeUnit": "ms", "record_shapes": 1, "traceEvents": [{"ph": "X"}],
           "metadata": {"a": 1}, "trace_id": "x" * 300, "cupti_version": float("nan"), "roctracer_version": 4,
           "deviceProperties": [{"name": "MI300X", "numSms": 304, "HOME": "/home/alice"}, "not a device"]}
    assert trace_header(raw) == {"schemaVersion": 1, "displayTimeUnit": "ms", "record_shapes": 1,
                                 "roctracer_version": 4, "deviceProperties": [{"name": "MI300X", "numSms": 304}]}


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="symlinks")
def test_a_planted_symlink_at_the_old_temporary_name_stays_untouched(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    trace = planted_trace(tmp_path / "trace.json")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "merged.json"
    link = tmp_path / ".merged.json.tmp"  # the fixed name the export used to write through
    link.symlink_to(victim)
    assert main(["export", str(trace), "-o", str(out)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "precious"
    assert link.is_symlink() and link.resolve() == victim
    assert not out.is_symlink() and merged(out)[1]["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".merged.json.tmp", "merged.json", "trace.json", "victim.txt"]


def test_export_refuses_an_output_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = planted_trace(tmp_path / "trace.json")
    for out, needle in ((tmp_path / "m.txt", "must end in .json"), (tmp_path / "no" / "m.json", "no such folder")):
        assert main(["export", str(trace), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1

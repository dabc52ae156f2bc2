"""Device peaks: a cited spec table (dense FLOP/s per unit and dtype, memory bandwidth), fuzzy matching of
trace device names, and measured peaks (``aiprof peaks``) that override the table.

Measured peaks live in one JSON file per user: ``$AIPROF_PEAKS_FILE`` if set, else
``$XDG_CACHE_HOME/aiprof/peaks.json`` (``~/.cache/aiprof/peaks.json``). ``--peaks FILE`` overrides both.

Spec values are datasheet peaks *without* structured sparsity (vendors quote sparse numbers for tensor
cores: those are halved here). GeForce cards quote FP16 tensor FLOP/s with FP16 accumulation; PyTorch
accumulates in FP32, so the FP32-accumulate rate is used. NVIDIA GPUs run FP32 matmuls on the CUDA cores
(PyTorch leaves TF32 off for matmul), so ``matrix_fp32`` equals the vector FP32 peak there; cuDNN
convolutions use TF32 by default, and the analysis applies that.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiprof.errors import AiprofError

TERA = 1e12
GIGA = 1e9


class PeaksFileError(AiprofError):
    """The measured-peaks file cannot be read or written."""


@dataclass(frozen=True)
class DevicePeaks:
    """Peak rates of one device. ``flops_per_s`` keys are ``{matrix|vector}_{dtype}``."""

    name: str
    memory_bw_bytes_per_s: float
    flops_per_s: Mapping[str, float]
    source: str
    provenance: str = "spec"  # "spec", "measured", or "spec+measured"
    device_type: str = "gpu"  # "gpu" or "cpu"
    matched_from: str = ""  # the trace's device name this was matched from
    measured_at: str = ""
    threads: int = 0  # CPU peaks: the threads the measurement (or the scaled roof) used; 0 unknown

    def compute_peak(self, unit: str, dtype: str) -> tuple[float, str] | None:
        """The applicable compute roof for work of this unit and dtype, with the key it came from."""
        for key in _peak_keys(unit, dtype):
            value = self.flops_per_s.get(key)
            if value:
                return float(value), key
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device_type": self.device_type,
            "provenance": self.provenance,
            "source": self.source,
            "matched_from": self.matched_from,
            "measured_at": self.measured_at,
            **({"threads": self.threads} if self.threads else {}),
            "memory_bw_bytes_per_s": int(self.memory_bw_bytes_per_s),
            "flops_per_s": {k: int(v) for k, v in sorted(self.flops_per_s.items())},
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> DevicePeaks:
        flops = data.get("flops_per_s", {})
        if not isinstance(flops, Mapping):
            raise ValueError("flops_per_s must be an object")
        return DevicePeaks(
            name=str(data["name"]),
            memory_bw_bytes_per_s=float(data["memory_bw_bytes_per_s"]),
            flops_per_s={str(k): float(v) for k, v in flops.items()},
            source=str(data.get("source", "")),
            provenance=str(data.get("provenance", "measured")),
            device_type=str(data.get("device_type", "gpu")),
            matched_from=str(data.get("matched_from", "")),
            measured_at=str(data.get("measured_at", "")),
            threads=_threads_of(data),
        )


def _threads_of(data: Mapping[str, Any]) -> int:
    """Threads a measured entry used: its ``threads`` field, or (files written before it existed) the
    ``(torch, N threads)`` that ``aiprof peaks`` wrote into ``source``; 0 when unknown."""
    value = data.get("threads")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    found = re.search(r"\b(\d+) threads?\b", str(data.get("source", "")))
    return int(found.group(1)) if found else 0


def scale_cpu_threads(peaks: DevicePeaks, threads: int) -> DevicePeaks:
    """CPU peaks for a run that used ``threads`` intra-op threads, from peaks measured with
    ``peaks.threads``: every compute roof is the per-thread rate × ``threads`` (matmul and vector work
    scale with cores; a thread cannot use another core's units). Memory bandwidth is left as measured:
    one core often reaches most of a small machine's DRAM bandwidth, and a lower roof would be a guess.
    Unchanged when either thread count is unknown or they are equal."""
    if peaks.device_type != "cpu" or threads <= 0 or peaks.threads <= 0 or threads == peaks.threads:
        return peaks
    factor = threads / peaks.threads
    return replace(peaks, flops_per_s={k: v * factor for k, v in peaks.flops_per_s.items()}, threads=threads,
                   source=f"{peaks.source}; compute roofs scaled from {peaks.threads} to {threads} threads")


def _peak_keys(unit: str, dtype: str) -> list[str]:
    """Keys to try, most specific first (e.g. bf16 vector work falls back to the fp16, then fp32 rate)."""
    if dtype in ("int64", "int32", "int16", "uint8", "bool", "complex64", "complex128", "complex32"):
        dtype = "int8" if unit == "matrix" and dtype == "uint8" else "fp32"
    if unit == "matrix":
        chains = {
            "fp32": ["matrix_fp32", "vector_fp32"],
            "tf32": ["matrix_tf32", "matrix_fp32", "vector_fp32"],
            "fp64": ["matrix_fp64", "vector_fp64"],
            "fp4": ["matrix_fp4", "matrix_fp8"],
            "fp8": ["matrix_fp8", "matrix_fp16"],
            "bf16": ["matrix_bf16", "matrix_fp16"],
            "int8": ["matrix_int8"],
        }
        return chains.get(dtype, [f"matrix_{dtype}", "matrix_fp16"])
    chains = {
        "bf16": ["vector_bf16", "vector_fp16", "vector_fp32"],
        "fp16": ["vector_fp16", "vector_fp32"],
        "fp8": ["vector_fp16", "vector_fp32"],
        "fp64": ["vector_fp64", "vector_fp32"],
    }
    return chains.get(dtype, [f"vector_{dtype}", "vector_fp32"])


# ----- the spec table ------------------------------------------------------------------------------------

_NV = "https://www.nvidia.com/"
_SOURCES = {
    "V100": "NVIDIA V100 datasheet (volta-v100-datasheet-update-us-1165301-r5)",
    "T4": "NVIDIA T4 datasheet (t4-tensor-core-datasheet-951643)",
    "A10": "NVIDIA A10 datasheet (a10-datasheet.pdf)",
    "A100": "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4); FP16 non-tensor from the "
    "NVIDIA A100 Tensor Core GPU Architecture whitepaper",
    "L4": "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4), sparse figures halved",
    "L40S": "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s), sparse figures halved",
    "2080": "NVIDIA Turing Architecture whitepaper, RTX 2080 Ti reference clocks, FP16 tensor w/ FP32 accumulate",
    "3090": "NVIDIA Ampere GA102 GPU Architecture whitepaper v2, RTX 3090, FP16 tensor w/ FP32 accumulate",
    "4090": "NVIDIA Ada GPU Architecture whitepaper, RTX 4090, tensor rates w/ FP32 accumulate",
    "H100": "NVIDIA H100 Tensor Core GPU datasheet and Hopper architecture whitepaper, sparse figures halved",
    "H800": "NVIDIA H800 datasheet (H100 SXM compute with FP64 cut to 1 TFLOP/s), sparse figures halved",
    "H200": "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200), sparse figures halved",
    "B200": "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), 8-GPU totals / 8, sparse halved",
    "B300": "NVIDIA HGX B300 specifications (nvidia.com/en-us/data-center/hgx), 8-GPU totals / 8, sparse halved",
    "MI210": "AMD Instinct MI210 product page / datasheet (amd.com/en/products/accelerators/instinct/mi200)",
    "MI250": "AMD Instinct MI250/MI250X product pages / datasheets (amd.com, instinct mi200)",
    "MI300X": "AMD Instinct MI300X datasheet (amd-instinct-mi300x-data-sheet.pdf)",
    "MI325X": "AMD Instinct MI325X datasheet (amd.com/en/products/accelerators/instinct/mi300/mi325x)",
}


def _spec(name: str, source: str, bw_gb_s: float, **tflops: float) -> DevicePeaks:
    return DevicePeaks(
        name=name,
        memory_bw_bytes_per_s=bw_gb_s * GIGA,
        flops_per_s={k: v * TERA for k, v in tflops.items()},
        source=_SOURCES[source],
    )


def _nv_tensor(fp32: float, tf32: float, fp16: float, **extra: float) -> dict[str, float]:
    """An NVIDIA part: FP32 matmuls on CUDA cores, TF32/FP16/BF16 on tensor cores."""
    rates = {"vector_fp32": fp32, "matrix_fp32": fp32, "matrix_tf32": tf32, "matrix_fp16": fp16, "matrix_bf16": fp16}
    rates.update(extra)
    return rates


_H100_SXM = _nv_tensor(67.0, 494.7, 989.4, matrix_fp8=1978.9, matrix_int8=1978.9, vector_fp64=34.0,
                       matrix_fp64=67.0, vector_fp16=133.8, vector_bf16=133.8)
_A100 = _nv_tensor(19.5, 156.0, 312.0, matrix_int8=624.0, vector_fp64=9.7, matrix_fp64=19.5, vector_fp16=78.0,
                   vector_bf16=39.0)
_MI300 = {"vector_fp64": 81.7, "matrix_fp64": 163.4, "vector_fp32": 163.4, "matrix_fp32": 163.4,
          "matrix_tf32": 653.7, "matrix_fp16": 1307.4, "matrix_bf16": 1307.4, "matrix_fp8": 2614.9,
          "matrix_int8": 2614.9}

SPEC_TABLE: list[DevicePeaks] = [
    _spec("Tesla V100 SXM2", "V100", 900, vector_fp64=7.8, vector_fp32=15.7, matrix_fp32=15.7, matrix_fp16=125.0,
          vector_fp16=31.4),
    _spec("Tesla V100 PCIe", "V100", 900, vector_fp64=7.0, vector_fp32=14.0, matrix_fp32=14.0, matrix_fp16=112.0,
          vector_fp16=28.0),
    _spec("Tesla T4", "T4", 320, vector_fp32=8.1, matrix_fp32=8.1, matrix_fp16=65.0, matrix_int8=130.0),
    _spec("NVIDIA A10", "A10", 600, **_nv_tensor(31.2, 62.5, 125.0, matrix_int8=250.0)),
    _spec("NVIDIA A100 40GB PCIe", "A100", 1555, **_A100),
    _spec("NVIDIA A100 40GB SXM", "A100", 1555, **_A100),
    _spec("NVIDIA A100 80GB PCIe", "A100", 1935, **_A100),
    _spec("NVIDIA A100 80GB SXM", "A100", 2039, **_A100),
    _spec("NVIDIA L4", "L4", 300, **_nv_tensor(30.3, 60.0, 121.0, matrix_fp8=242.5, matrix_int8=242.5)),
    _spec("NVIDIA L40S", "L40S", 864, **_nv_tensor(91.6, 183.0, 362.05, matrix_fp8=733.0, matrix_int8=733.0)),
    _spec("NVIDIA GeForce RTX 2080 Ti", "2080", 616, vector_fp32=13.4, matrix_fp32=13.4, matrix_fp16=53.8,
          vector_fp16=26.9, matrix_int8=215.2),
    _spec("NVIDIA GeForce RTX 3090", "3090", 936, **_nv_tensor(35.6, 35.6, 71.0, matrix_int8=284.0,
                                                              vector_fp16=35.6)),
    _spec("NVIDIA GeForce RTX 4090", "4090", 1008, **_nv_tensor(82.6, 82.6, 165.2, matrix_fp8=330.3,
                                                               matrix_int8=660.6, vector_fp16=82.6)),
    _spec("NVIDIA H100 SXM", "H100", 3350, **_H100_SXM),
    _spec("NVIDIA H100 PCIe", "H100", 2000, **_nv_tensor(51.2, 378.0, 756.0, matrix_fp8=1513.0, matrix_int8=1513.0,
                                                        vector_fp64=25.6, matrix_fp64=51.2, vector_fp16=102.4,
                                                        vector_bf16=102.4)),
    _spec("NVIDIA H800 SXM", "H800", 3350, **{**_H100_SXM, "vector_fp64": 1.0, "matrix_fp64": 1.0}),
    _spec("NVIDIA H200", "H200", 4800, **_H100_SXM),
    _spec("NVIDIA B200", "B200", 8000, **_nv_tensor(75.0, 1125.0, 2250.0, matrix_fp8=4500.0, matrix_fp4=9000.0,
                                                   matrix_int8=4500.0, vector_fp64=37.0, matrix_fp64=37.0)),
    _spec("NVIDIA B300", "B300", 8000, **_nv_tensor(75.0, 1125.0, 2250.0, matrix_fp8=4500.0, matrix_fp4=13500.0,
                                                   vector_fp64=1.25, matrix_fp64=1.25)),
    _spec("AMD Instinct MI210", "MI210", 1638.4, vector_fp64=22.6, matrix_fp64=45.3, vector_fp32=22.6,
          matrix_fp32=45.3, matrix_fp16=181.0, matrix_bf16=181.0, matrix_int8=181.0),
    _spec("AMD Instinct MI250", "MI250", 3276.8, vector_fp64=45.3, matrix_fp64=90.5, vector_fp32=45.3,
          matrix_fp32=90.5, matrix_fp16=362.1, matrix_bf16=362.1, matrix_int8=362.1),
    _spec("AMD Instinct MI250X", "MI250", 3276.8, vector_fp64=47.9, matrix_fp64=95.7, vector_fp32=47.9,
          matrix_fp32=95.7, matrix_fp16=383.0, matrix_bf16=383.0, matrix_int8=383.0),
    _spec("AMD Instinct MI300X", "MI300X", 5300, **_MI300),
    _spec("AMD Instinct MI325X", "MI325X", 6000, **_MI300),
]

# Device-name patterns (lower case, '-'/'_' as spaces), most specific first.
_NAME_RULES: list[tuple[str, str]] = [
    (r"b300", "NVIDIA B300"),
    (r"b200", "NVIDIA B200"),
    (r"h200", "NVIDIA H200"),
    (r"h800", "NVIDIA H800 SXM"),
    (r"h100.*pcie", "NVIDIA H100 PCIe"),
    (r"h100", "NVIDIA H100 SXM"),
    (r"a100.*(80 ?gb.*pcie|pcie.*80 ?gb)", "NVIDIA A100 80GB PCIe"),
    (r"a100.*pcie", "NVIDIA A100 40GB PCIe"),
    (r"a100.*80 ?gb", "NVIDIA A100 80GB SXM"),
    (r"a100", "NVIDIA A100 40GB SXM"),
    (r"l40s", "NVIDIA L40S"),
    (r"\bl4\b", "NVIDIA L4"),
    (r"\ba10\b", "NVIDIA A10"),
    (r"\bt4\b", "Tesla T4"),
    (r"v100.*pcie", "Tesla V100 PCIe"),
    (r"v100", "Tesla V100 SXM2"),
    (r"2080 ?ti", "NVIDIA GeForce RTX 2080 Ti"),
    (r"3090(?! ?ti)", "NVIDIA GeForce RTX 3090"),
    (r"4090", "NVIDIA GeForce RTX 4090"),
    (r"mi325", "AMD Instinct MI325X"),
    (r"mi300x", "AMD Instinct MI300X"),
    (r"mi250x", "AMD Instinct MI250X"),
    (r"mi250", "AMD Instinct MI250"),
    (r"mi210", "AMD Instinct MI210"),
]


def spec_for(device_name: str) -> DevicePeaks | None:
    """The spec-table entry for a trace's device name (fuzzy: ``NVIDIA H100 80GB HBM3`` → H100 SXM)."""
    text = re.sub(r"[-_]", " ", device_name.lower())
    by_name = {p.name: p for p in SPEC_TABLE}
    for pattern, name in _NAME_RULES:
        if re.search(pattern, text):
            return replace(by_name[name], matched_from=device_name)
    return None


# ----- measured peaks -----------------------------------------------------------------------------------


def default_peaks_path() -> Path:
    """Where measured peaks are kept: $AIPROF_PEAKS_FILE, else the user cache folder."""
    env = os.environ.get("AIPROF_PEAKS_FILE")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "aiprof" / "peaks.json"


def load_measured(path: Path | None = None, *, required: bool = False) -> dict[str, DevicePeaks]:
    """Measured peaks by device name; {} when the file does not exist (unless ``required``)."""
    file = path or default_peaks_path()
    if not file.exists():
        if required:
            raise PeaksFileError(f"peaks file {file} does not exist: run `aiprof peaks` or fix --peaks")
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        devices = data["devices"]
        return {str(k): DevicePeaks.from_dict(v) for k, v in devices.items()}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise PeaksFileError(f"cannot read peaks file {file} ({err}): delete it and rerun `aiprof peaks`") from err


def save_measured(peaks: list[DevicePeaks], path: Path | None = None) -> Path:
    """Merge these measured peaks into the peaks file (one entry per device name)."""
    file = path or default_peaks_path()
    existing = load_measured(file) if file.exists() else {}
    for item in peaks:
        existing[item.name] = item
    payload = {"version": 1, "devices": {k: v.to_dict() for k, v in sorted(existing.items())}}
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        from aiprof.fsutil import atomic_write

        atomic_write(file, json.dumps(payload, indent=2) + "\n")
    except OSError as err:
        raise PeaksFileError(f"cannot write peaks file {file} ({err}): pass --peaks FILE") from err
    return file


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass(frozen=True)
class PeaksChoice:
    """The peaks an analysis uses (None: none known), and a note saying where they came from or why none."""

    peaks: DevicePeaks | None
    note: str
    notes: list[str] = field(default_factory=list)


def resolve(device_name: str | None, *, cpu: bool, measured: Mapping[str, DevicePeaks]) -> PeaksChoice:
    """Pick peaks for a trace: measured for this device override the spec table key by key."""
    if cpu:
        cpus = sorted((p for p in measured.values() if p.device_type == "cpu"), key=lambda p: p.measured_at)
        if cpus:
            chosen = cpus[-1]
            return PeaksChoice(chosen, f"measured CPU peaks of {chosen.name} ({chosen.measured_at})")
        return PeaksChoice(None, "no measured CPU peaks: run `aiprof peaks` on this machine for a CPU roofline")
    name = device_name or ""
    spec = spec_for(name) if name else None
    mine = measured.get(name) if name else None
    if spec is not None and mine is not None:
        merged = {**spec.flops_per_s, **mine.flops_per_s}
        combined = replace(spec, flops_per_s=merged, memory_bw_bytes_per_s=mine.memory_bw_bytes_per_s,
                           provenance="spec+measured", source=f"{mine.source}; unmeasured keys: {spec.source}",
                           measured_at=mine.measured_at)
        return PeaksChoice(combined, f"measured peaks for {name!r} over the {spec.name} spec")
    if mine is not None:
        return PeaksChoice(replace(mine, matched_from=name), f"measured peaks for {name!r}")
    if spec is not None:
        return PeaksChoice(spec, f"spec sheet of {spec.name} (matched from {name!r})")
    shown = repr(name) if name else "(no device name in the trace)"
    return PeaksChoice(None, f"unknown device {shown}: no spec and no measured peaks; run `aiprof peaks` "
                             "on that machine or pass --peaks FILE")

"""``aiprof peaks [--device cpu|cuda|all] [--quick] [--peaks FILE] [--show]``: measure this machine's
achievable matmul FLOP/s and copy bandwidth, and save them where ``aiprof roofline`` finds them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiprof.errors import AiprofError


class PeaksCommand:
    name = "peaks"
    help = "Measure achievable FLOP/s and memory bandwidth here (CPU, CUDA) for the roofline."

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all", help="what to measure")
        parser.add_argument("--quick", action="store_true", help="smaller, faster benchmarks (less accurate)")
        parser.add_argument("--peaks", type=Path, help="peaks file to write (default: $AIPROF_PEAKS_FILE or "
                                                       "~/.cache/aiprof/peaks.json)")
        parser.add_argument("--show", action="store_true", help="print the saved peaks and measure nothing")

    def run(self, args: argparse.Namespace) -> int:
        from aiprof.roofline import bench
        from aiprof.roofline.peaks import DevicePeaks, default_peaks_path, load_measured, save_measured

        path = args.peaks or default_peaks_path()
        if args.show:
            saved = load_measured(path)
            if not saved:
                print(f"no measured peaks in {path}: run `aiprof peaks`")
            for item in saved.values():
                _print(item)
            return 0
        measured: list[DevicePeaks] = []
        if args.device in ("cpu", "all"):
            measured.append(bench.measure_cpu(quick=args.quick))
        if args.device in ("cuda", "all"):
            try:
                measured += bench.measure_cuda(quick=args.quick)
            except ImportError:
                if args.device == "cuda":
                    raise AiprofError("measuring CUDA peaks needs torch: pip install 'aiprof[torch]'") from None
        if args.device == "cuda" and len(measured) == 0:
            raise AiprofError("no CUDA device visible: run with --device cpu, or on the GPU machine")
        saved_to = save_measured(measured, path)
        for item in measured:
            _print(item)
        print(f"saved to {saved_to}", file=sys.stderr)
        return 0


def _print(item: object) -> None:
    from aiprof.roofline.peaks import DevicePeaks

    assert isinstance(item, DevicePeaks)
    print(f"{item.name}: memory {item.memory_bw_bytes_per_s / 1e9:.1f} GB/s")
    for key, value in sorted(item.flops_per_s.items()):
        print(f"  {key:14} {value / 1e12:10.3f} TFLOP/s")

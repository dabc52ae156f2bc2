"""The core never imports a training framework: only ``aiprof.hf`` / ``aiprof.lightning`` do, on request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FRAMEWORKS = ("transformers", "accelerate", "pytorch_lightning", "lightning", "lightning_fabric")

CORE = """
import sys
import aiprof, aiprof.app, aiprof.cli, aiprof.capture.api, aiprof.capture.bootstrap, aiprof.integrations
from aiprof.rules import framework
aiprof.app.analyze([sys.argv[1]])
print(",".join(sorted(m for m in {names!r} if m in sys.modules)))
"""


def test_analysis_and_capture_import_no_framework(tmp_path: Path) -> None:
    from kineto_builder import TraceBuilder

    b = TraceBuilder()
    for i in range(3):
        b.step(i, ts=i * 100, dur=100)
        b.cpu_op("aten::mm", ts=i * 100 + 10, dur=50)
    path = b.write(tmp_path / "t.json")
    done = subprocess.run([sys.executable, "-c", CORE.format(names=FRAMEWORKS), str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""

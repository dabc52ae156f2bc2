"""The README's Python examples run as written: the ``aiprof.profile`` block records a real CPU run into
``runs/exp1`` (with a ``loader`` and a ``train_step`` of this test's making), then the "Python API" block
analyses, renders and loads that run directory. ``help(aiprof.profile)`` lists every option."""

from __future__ import annotations

import inspect
import pydoc
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aiprof
from aiprof.capture.api import Profile

README = Path(__file__).resolve().parents[2] / "README.md"

# What the README's profile example leaves to the reader: a loader and a training step.
PRELUDE = textwrap.dedent(
    """
    import torch
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = [torch.randn(16, 32) for _ in range(14)]

    def train_step(batch):
        model(batch).square().mean().backward()
        opt.step()
        opt.zero_grad()
    """
)


def _python_blocks(after_heading: str) -> list[str]:
    """The ```python blocks of the README section under ``after_heading``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(after_heading)
    end = text.find("\n## ", start + len(after_heading))
    section = text[start:end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_api_example_runs_on_a_run_directory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (profile_block,) = _python_blocks("## Profile your script")
    (api_block,) = _python_blocks("## Python API")
    assert "aiprof.profile(" in profile_block and "runs/exp1" in api_block
    script = tmp_path / "readme_example.py"
    script.write_text(PRELUDE + profile_block + "\n" + api_block, encoding="utf-8")
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = tmp_path / "runs" / "exp1"
    assert (run_dir / "meta.json").exists() and list(run_dir.glob("rank0*.json*"))
    assert "## aiprof: 1 rank(s), 4 step(s)" in res.stdout  # the rendered Markdown report
    assert all(line.startswith("aiprof:") for line in res.stderr.splitlines()), res.stderr[-2000:]  # no torch chatter


def test_help_of_profile_lists_every_option() -> None:
    doc = pydoc.render_doc(aiprof.profile, renderer=pydoc.plaintext)
    params = inspect.signature(Profile.__init__).parameters
    options = [name for name in params if name != "self"]
    assert options == [name for name in inspect.signature(aiprof.profile).parameters]
    for name in options:
        default = params[name].default
        # each option: its name on a line of its own, then what it does and its default
        block = re.search(rf"\n\s+{name}\n(.*?)(?=\n\s+\w+\n|\n\s+Returns)", doc, flags=re.S)
        assert block, f"help(aiprof.profile) does not describe {name}"
        assert f"default {default}" in block.group(1) or f"default {default!r}" in block.group(1) \
            or "default None" in block.group(1) and default is None, (name, block.group(1))

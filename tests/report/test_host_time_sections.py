"""The source-lines and modules sections in every format: through aiprof.analyze on a synthetic trace with
Python stacks (sections present, findings given their source line, JSON round trip), the one-line hint
without stacks, and hostile frame and module names escaped in terminal, Markdown and HTML."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from kineto_builder import TraceBuilder
from typed_builders import finding, rank, report

from aiprof import app
from aiprof.analysis.modules import ModuleProfile, ModuleStat
from aiprof.analysis.stacks import FrameStat, StackNode, StackProfile
from aiprof.report import escape
from aiprof.report.model import Report
from aiprof.report.render import render

US = 1000


def _trace_with_stacks(tmp_path: Path, frame: str = "train.py(20): step", module: str = "nn.Module: Net_0") -> Path:
    b = TraceBuilder()
    for i in range(3):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        main = b.python("train.py(10): main", t0, 1000)
        step = b.python(frame, t0 + 10, 900, parent=main)
        net = b.python(module, t0 + 20, 800, parent=step)
        lib = b.python("torch/nn/functional.py(1): linear", t0 + 30, 700, parent=net)
        for k in range(40):  # many small ops: host-bound
            b.cpu_op("aten::add", ts=t0 + 40 + 15 * k, dur=10, seq=100 * i + k)
        del lib
    return b.write(tmp_path / "trace.json")


def _analyze(path: Path) -> Report:
    return app.analyze([path], app.AnalyzeOptions(workers=1))


def test_sections_through_analyze(tmp_path: Path) -> None:
    doc = _analyze(_trace_with_stacks(tmp_path))
    stacks, modules = doc.ranks[0].stacks, doc.ranks[0].modules
    assert isinstance(stacks, StackProfile) and stacks.recorded and stacks.steps == 3
    assert stacks.user_lines[0].name == "train.py(20): step"
    assert isinstance(modules, ModuleProfile) and [m.path for m in modules.modules] == ["Net_0"]
    lines = [f.evidence.get("source_lines") or [f.evidence.get("source_line")] for f in doc.findings]
    assert any(ls and ls[0] == "train.py(20): step" for ls in lines), lines
    again = msgspec.json.decode(render(doc, "json"), type=Report)
    assert again.ranks[0].stacks == stacks and again.ranks[0].modules == modules
    term = render(doc, "terminal", width=80)
    assert "Host time by source line" in term and "train.py(20): step" in term and "Net_0" in term
    assert max(len(line) for line in term.splitlines() if "source line" in line or "nn.Module" in line) <= 80
    md = render(doc, "md")
    assert "### Host time by source line" in md and "### Modules" in md
    html = render(doc, "html")
    assert '<section id="source-lines">' in html and '<section id="modules">' in html and "<svg" in html


def test_without_stacks_one_line_says_how(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    b.cpu_op("aten::mm", ts=10, dur=20)
    doc = _analyze(b.write(tmp_path / "t.json"))
    stacks = doc.ranks[0].stacks
    assert isinstance(stacks, StackProfile) and not stacks.recorded
    for fmt in ("terminal", "md", "html"):
        text = render(doc, fmt)
        assert "aiprof run --with-stack" in text, fmt
        assert "### Modules" not in text and '<section id="modules">' not in text


def test_older_report_without_sections_renders(tmp_path: Path) -> None:
    doc = report([rank(0)])
    for fmt in ("terminal", "md", "html"):
        assert "--with-stack" not in render(doc, fmt)


# ---------------------------------------------------------------------------------------------------
# Hostile names
# ---------------------------------------------------------------------------------------------------
EVIL = [
    "<img src=x onerror=alert(1)>.py(1): f",
    "a|b.py(2): `x` [l](https://evil.example) @octocat",
    "\x1b]8;;https://evil.example\x1b\\x.py(3): f\x07",
    "\u202eevil.py(4): f\r# heading",
    "[/]x.py(5): [bold red]f",
]


def _evil_doc(name: str) -> Report:
    stacks = StackProfile(
        recorded=True, steps=2, step_source="ProfilerStep", window_ns=100 * US, python_ns=100 * US, events=4,
        main_tid=1, user_lines=[FrameStat(name=name, user=True, calls=2, self_ns=10 * US, total_ns=90 * US, own_ns=60 * US)],
        frames=[FrameStat(name=name, user=True, calls=2, self_ns=10 * US, total_ns=90 * US)],
        tree=[StackNode(id=0, parent=-1, name=name, tid=1, calls=2, total_ns=100 * US, self_ns=10 * US),
              StackNode(id=1, parent=0, name="nn.Module: " + name, tid=1, calls=2, total_ns=90 * US, self_ns=90 * US)],
        tree_min_ns=1,
    )
    modules = ModuleProfile(
        recorded=True, source="python_function", steps=2, window_ns=100 * US, backward_from="fwdbwd flows", has_device=True,
        module_count=2,
        modules=[ModuleStat(path=name, name=name, parent=-1, depth=0, calls=2, forward_ns=90 * US, forward_self_ns=10 * US),
                 ModuleStat(path=f"{name}/{name}", name=name, parent=0, depth=1, calls=2, forward_ns=80 * US,
                            forward_self_ns=80 * US, backward_ns=5 * US)],
    )
    r = msgspec.structs.replace(rank(0), stacks=stacks, modules=modules)
    return report([r], findings=[finding("slow", evidence={"source_lines": [name]})])


def _unsafe(text: str) -> list[str]:
    return [c for c in text if c not in "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2066\u2028")]


@pytest.mark.parametrize("name", EVIL, ids=repr)
def test_hostile_frame_names_are_escaped_in_every_format(name: str) -> None:
    doc = _evil_doc(name)
    term = render(doc, "terminal", width=100, is_tty=True)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", term)
    assert _unsafe(plain) == [] and "\x1b]" not in term
    assert escape.terminal(name)[-20:] in plain  # shown as written (long names: their end), never interpreted
    md = render(doc, "md")
    assert "<img" not in md and re.search(r"(?<!\\)\]\(", md) is None and "@octocat" not in md
    assert not any(line.startswith("# ") for line in md.splitlines())
    section = md.split("### Host time by source line", 1)[1].split("###", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    assert table and all(len(re.findall(r"(?<!\\)\|", line)) == 5 for line in table), table
    html = render(doc, "html")
    body = html.split('id="aiprof-data">')[0]
    assert "<img src" not in html and html.count("</script>") == 1
    assert name not in html or not any(ch in name for ch in "<>&\"'\x1b\u202e")
    for section_id in ("source-lines", "modules"):
        part = body.split(f'<section id="{section_id}">', 1)[1].split("</section>", 1)[0]
        assert escape.html(escape.terminal(name))[:10] in part, section_id

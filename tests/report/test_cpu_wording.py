"""CPU-only reports speak CPU: no GPU rows, columns or words in any format (terminal, Markdown, HTML,
compare), the buckets named for what they mean on a CPU, units and per-step vs total on every column;
GPU traces keep their GPU wording. Checked on a real torch CPU run and the shared CPU-only trace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cpu_runs import cpu_run  # noqa: F401 - the fixture
from report_docs import shared_path
from report_text import html_tables, markdown_tables, unlabelled_duration_columns, visible_text

from aiprof import app
from aiprof.app import RenderOptions

# Words that only make sense with an accelerator. "device" alone is allowed (a CPU is the rank's device).
GPU_WORDS = re.compile(r"(?i)\bGPU\b|\bdevice idle\b|\bGPU idle\b|utili[sz]ation|\bmemcpy\b|\bmemset\b|\bkernels?\b|\bCUDA\b")


def _cpu_paths(cpu_run: Path) -> list[Path]:  # noqa: F811
    paths = [cpu_run]
    try:
        paths.append(shared_path("cpu_only"))
    except pytest.skip.Exception:
        pass
    return paths


def _all_formats(path: Path) -> dict[str, str]:
    """Every human-facing rendering of ``path``'s report and of its comparison with itself. The HTML's
    "Run metadata" section is left out: it lists the run directory's meta.json as recorded (its telemetry
    sources name the GPU probe it skipped), data rather than wording."""
    report = app.analyze([path])
    comparison = app.compare(path, path)
    out: dict[str, str] = {}
    for width in (80, 120):
        out[f"terminal@{width}"] = app.render(report, "terminal", RenderOptions(width=width))
        out[f"compare terminal@{width}"] = app.render(comparison, "terminal", RenderOptions(width=width))
    out["markdown"] = app.render(report, "md")
    out["compare markdown"] = app.render(comparison, "md")
    out["html"] = visible_text(app.render(report, "html"), drop_sections=("metadata",))
    out["compare html"] = visible_text(app.render(comparison, "html"), drop_sections=("metadata",))
    return out


def test_cpu_reports_have_no_gpu_words(cpu_run: Path) -> None:  # noqa: F811
    for path in _cpu_paths(cpu_run):
        for fmt, text in _all_formats(path).items():
            hits = sorted({m.group(0) for m in GPU_WORDS.finditer(text)})
            assert not hits, f"{path.name} {fmt}: {hits}"


def test_cpu_buckets_say_what_they_mean(cpu_run: Path) -> None:  # noqa: F811
    report = app.analyze([cpu_run])
    terminal = app.render(report, "terminal", RenderOptions(width=100))
    markdown = app.render(report, "md")
    page = app.render(report, "html")
    for text in (terminal, markdown, visible_text(page)):
        assert "CPU busy in ops" in text and "between ops" in text
    assert "Between ops, by cause" in terminal and "Idle by cause" not in terminal
    assert "Between ops, by cause" in visible_text(page) and not re.search(r"(?i)\bidle\b", visible_text(page, ("metadata",)))
    # One process, no collective: a communication row or column could only read 0.
    assert report.ranks[0].totals.breakdown_ns["communication"] == 0
    for text in (terminal, markdown, visible_text(page, drop_sections=("metadata",))):
        assert not re.search(r"(?i)\bcomm(unication)?\b", text)


def test_cpu_html_ops_table_has_no_gpu_columns(cpu_run: Path) -> None:  # noqa: F811
    page = app.render(app.analyze([cpu_run]), "html")
    ops = page[page.index('<section id="ops">'):]
    heads = html_tables(ops[: ops.index("</section>")])[0][0]
    assert heads[:2] == ["op", "calls"] and not [h for h in heads if "GPU" in h], heads
    assert all("total" in h for h in heads[2:]), heads


def test_gpu_reports_keep_gpu_wording() -> None:
    report = app.analyze([shared_path("resnet50_nw0")])
    terminal = app.render(report, "terminal", RenderOptions(width=100))
    assert "GPU utilization" in terminal and "Idle by cause" in terminal and "memcpy" in terminal
    assert "GPU utilization" in app.render(report, "md")
    page = visible_text(app.render(report, "html"))
    assert "GPU utilization" in page and "Idle causes" in page and "GPU self, total" in page


@pytest.mark.parametrize("key", ["cpu", "resnet50_nw0", "dlrm_8rank", "mi300_resnet"])
def test_every_duration_column_says_per_step_or_total(key: str, cpu_run: Path) -> None:  # noqa: F811
    path = cpu_run if key == "cpu" else shared_path(key)
    report = app.analyze([path])
    md_tables = markdown_tables(app.render(report, "md"))
    # The findings' evidence tables are left out: their columns are the rules' evidence keys, which carry
    # their unit in the name (``gap_ns`` is one gap, ``ns_per_step`` a mean per step).
    page = app.render(report, "html")
    page_tables = html_tables(re.sub(r'<section id="findings">.*?</section>', "", page, flags=re.S))
    assert md_tables and page_tables
    assert unlabelled_duration_columns(md_tables) == []
    assert unlabelled_duration_columns(page_tables) == []
    terminal = app.render(report, "terminal", RenderOptions(width=100))
    assert "time /step" in terminal and ", total" in terminal

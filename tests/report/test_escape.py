"""Trace strings at the sinks: no control character reaches a terminal, names are never rich markup,
Markdown cannot be broken or made live by a name (issue 17). Tested on a generated list of hostile
strings and through every terminal and Markdown renderer with a forced TTY."""

from __future__ import annotations

import io
import re
import unicodedata

import pytest
from rich.console import Console
from typed_builders import finding, rank, report

from aiprof.report import escape
from aiprof.report.compare import compare_reports
from aiprof.report.render import render

CONTROL = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]
BIDI = ["\u202e", "\u2066", "\u2069", "\u200f", "\u2028", "\u2029"]
SEQUENCES = [
    "\x1b[2J\x1b[H",  # clear screen
    "\x1b]0;pwned\x07",  # window title
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b]52;c;ZXZpbA==\x07",  # OSC 52 clipboard write
    "\x9b31m",  # C1 CSI
    "line\rOVERWRITE",
]
MARKUP = ["[/]x", "[rank0]", "[link=https://evil.example]x[/link]", "[bold red]x", "[/bold]", "\\[x]", ":smile:"]
MARKDOWN = [
    "a|b", "x\n# heading", "x\r\n## h", "`code`", "![img](https://evil.example/x.png)", "[link](https://evil.example)",
    "<script>alert(1)</script>", "@octocat", "https://evil.example", "www.evil.example", "# top", "- item", "**bold**",
    "a\\|b", "&lt;",
]
HOSTILE = [f"k{c}n" for c in CONTROL + BIDI] + SEQUENCES + MARKUP + MARKDOWN + ["x" * 5000, "名前" * 300]


def _unsafe(text: str) -> list[str]:
    """Characters a terminal would act on: C0/C1 controls and bidi/separators (newline allowed)."""
    return [c for c in text if c != "\n" and (unicodedata.category(c) == "Cc" or c in BIDI)]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda s: repr(s[:20]))
def test_terminal_escape_leaves_no_control_character(text: str) -> None:
    out = escape.terminal(text)
    assert _unsafe(out) == [] and "\n" not in out
    if text.isprintable() and not set(text) & set(BIDI):
        assert out == text  # printable text is left alone


def test_control_characters_are_made_visible_not_dropped() -> None:
    assert escape.terminal("a\x1bb") == "a\u241bb"
    assert escape.terminal("a\x9bb") == "a\\x9bb"
    assert escape.terminal("a\u202eb") == "a\\u202eb"
    assert escape.terminal("a\x7f") == "a\u2421"


@pytest.mark.parametrize("text", MARKUP, ids=repr)
def test_names_are_never_rich_markup(text: str) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=200, highlight=False, emoji=False)
    console.print(escape.terminal_text(text))
    console.print(escape.markup(text))
    assert buf.getvalue().splitlines() == [text, text]


def _evil_report(name: str):  # type: ignore[no-untyped-def]
    ranks = [rank(r, device=f"gpu:0{name}", name=name, kernel=name, op=name, notes=(name,)) for r in range(2)]
    return report(ranks, findings=[finding(name, fix=name, evidence={"kernel": name})], sources=[f"/x/{name}"], warnings=[name])


def _tty_render(doc) -> str:  # type: ignore[no-untyped-def]
    return render(doc, "terminal", width=100, is_tty=True)


SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colours rich writes itself


@pytest.mark.parametrize("name", SEQUENCES + MARKUP + [f"k{c}n" for c in CONTROL], ids=lambda s: repr(s[:20]))
def test_terminal_reports_on_a_tty_pass_no_sequence_from_a_trace(name: str) -> None:
    doc = _evil_report(name)
    for text in (_tty_render(doc), _tty_render(compare_reports(doc, doc))):
        plain = SGR.sub("", text)
        assert _unsafe(plain) == [], repr(plain[:200])
        assert "\x1b]" not in text and "\x07" not in text
    if name in MARKUP:
        assert name in SGR.sub("", _tty_render(doc))  # shown as written, never interpreted


def _unescaped(text: str, char: str) -> bool:
    return re.search(r"(?<!\\)" + re.escape(char), text) is not None


@pytest.mark.parametrize("text", HOSTILE, ids=lambda s: repr(s[:20]))
def test_markdown_escape_cannot_break_a_table_or_go_live(text: str) -> None:
    out = escape.markdown(text)
    assert "\n" not in out and "\r" not in out and _unsafe(out) == []
    for char in "|`[]!*":
        assert not _unescaped(out, char), (char, out)
    assert "<" not in out and ">" not in out
    assert re.search(r"@(?!&#8203;)", out) is None  # no @mention
    assert "://" not in out and "www." not in out.lower()  # no autolink
    assert not re.match(r"\s*[#=+-]", out)  # no heading or list at the start


@pytest.mark.parametrize("name", MARKDOWN, ids=repr)
def test_markdown_report_keeps_its_structure_with_hostile_names(name: str) -> None:
    doc = _evil_report(name)
    clean = render(_evil_report("name"), "md")
    for full in (render(doc, "md"), render(compare_reports(doc, doc), "md")):
        text = "\n".join(line for line in full.splitlines() if not line.startswith("       "))  # code blocks are inert
        headings = [line for line in text.splitlines() if line.startswith("#")]
        assert all(h.startswith(("## aiprof", "### ")) for h in headings), headings
        assert "<script" not in text and not _unescaped(text, "](") and "@octocat" not in text
    table = [line for line in render(doc, "md").splitlines() if line.startswith("|")]
    expected = [line for line in clean.splitlines() if line.startswith("|")]
    assert [_cells(row) for row in table] == [_cells(row) for row in expected]  # no row ended, none added


def _cells(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row))


HTML_EVIL = ["<img src=x onerror=alert(1)>", "\"'><svg onload=alert(1)>", "</script><script>alert(1)</script>"]


def _evil_everywhere(name: str):  # type: ignore[no-untyped-def]
    """A name in every section the HTML report has: steps, devices, notes, sources, findings, kernels,
    ops, collectives, roofline, incomplete steps, trace and run metadata, telemetry."""
    import msgspec

    from aiprof.analysis.comm import CollectiveSummary, CommOverlap, CommunicationSection
    from aiprof.analysis.comm_exposure import DeviceCommExposure, ExposureRow, GroupExposure, PhaseExposure
    from aiprof.report.model import IncompleteStep
    from aiprof.roofline.section import RooflinePeaks, RooflineRowRecord, RooflineSection
    from aiprof.runmeta import RunMeta, RunTelemetry

    doc = _evil_report(name)
    ranks = []
    for r in doc.ranks:
        steps = [msgspec.structs.replace(s, name=name) for s in r.steps]
        n = {"kernels": 1, "comm_ns": 1000, "hidden_ns": 990, "exposed_ns": 10, "exposed_ns_per_step": 10,
             "hidden_pct": 99.0}
        exposure = DeviceCommExposure(
            device=0, steps=1, phase_from_time=0, **n, by_phase=[PhaseExposure(phase="forward", **n)],
            by_group=[GroupExposure(group=name, group_desc=name, group_size=2, **n)],
            rows=[ExposureRow(group=name, phase="forward", collective=name, **n)])
        comm = CommunicationSection(
            collectives=[], collective_count=1,
            summary=[CollectiveSummary(collective=name, process_group_name=name, group_size=2, dtype=name,
                                       message_bytes=1024, count=1, total_ns=1000, mean_ns=1000.0,
                                       algbw_gb_per_s=1.0, busbw_gb_per_s=1.0)],
            overlap=[CommOverlap(device=0, comm_ns=1000, overlapped_ns=990, exposed_ns=10, overlap_pct=99.0)],
            exposure=[exposure])
        roof = RooflineSection(
            peaks=RooflinePeaks(name=name, memory_bw_bytes_per_s=10**12, flops_per_s={name: 10**14}), peaks_note=name,
            notes=[name], rows=[RooflineRowRecord(name=name, input_dims=name, count=1, time_ns=1000, bound=name,
                                                  roof_key=name, drawn=True, arithmetic_intensity_flops_per_byte=10.0,
                                                  achieved_flops_per_s=10**12, pct_of_roof=1.0, saving_ns=1)])
        incomplete = [IncompleteStep(name=name, number=9, start_ns=0, duration_ns=10, reason=name, detail=name)]
        ranks.append(msgspec.structs.replace(r, steps=steps, communication=comm, roofline=roof, incomplete_steps=incomplete,
                                             trace_metadata={name: name}, distributed={"backend": name}))
    telemetry = RunTelemetry(path=name, samples=2, t_unix_ns=[0, 1], series={"cpu_pct": [1.0, 2.0]})
    return msgspec.structs.replace(doc, ranks=ranks, run_metadata=RunMeta(command=[name], cwd=name, job=name),
                                   telemetry=telemetry)


@pytest.mark.parametrize("name", HTML_EVIL, ids=repr)
def test_html_escapes_a_hostile_name_in_every_section(name: str) -> None:
    text = render(_evil_everywhere(name), "html")
    assert name not in text and "<img" not in text and "<svg onload" not in text
    assert text.count("</script>") == 1
    body = text.split('id="aiprof-data">')[0]
    for section in ("findings", "steps", "ranks", "collectives", "roofline", "kernels", "ops", "metadata", "notes"):
        part = body.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
        assert escape.html(name)[:12] in part or escape.html(name[:24])[:12] in part, section


@pytest.mark.parametrize("name", ["[/]x", "[link=https://evil.example]x", "\x1b]52;c;ZXZpbA==\x07", "a\rb"], ids=repr)
def test_roofline_terminal_output_escapes_op_names(tmp_path, name: str) -> None:  # type: ignore[no-untyped-def]
    import aiprof
    from kineto_builder import TraceBuilder

    from aiprof.roofline.analysis import roofline
    from aiprof.report.roofline_terminal import render_plain, render_rich

    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    op = b.cpu_op(name, ts=1, dur=10)
    b.launch(op, kernel="k", kernel_ts=5, kernel_dur=10)
    result = roofline(aiprof.load(b.write(tmp_path / "t.json")))  # type: ignore[arg-type]
    for text in (render_rich(result), render_plain(result)):
        plain = SGR.sub("", text)
        assert _unsafe(plain) == []
        assert escape.terminal(name) in plain  # shown, as written


@pytest.mark.parametrize("name", SEQUENCES[:2] + MARKDOWN[:2] + HTML_EVIL[:1], ids=lambda s: repr(s[:20]))
def test_the_exposure_section_escapes_group_and_collective_names(name: str) -> None:
    doc = _evil_everywhere(name)
    tty = _tty_render(doc)
    assert "exposed vs hidden" in tty
    assert _unsafe(SGR.sub("", tty)) == [] and "\x1b]" not in tty
    text = render(doc, "md")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "forward" in line]
    assert rows and all(_cells(row) == 8 for row in rows)  # group | phase | collective | … : no cell added
    assert "<script" not in text and "<img" not in text

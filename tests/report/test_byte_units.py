"""One unit family per kind of number (docs/numbers.md "Units"): amounts of bytes in binary units (KiB,
MiB, GiB) in every report, rates in decimal GB/s and MB/s; the charts' scales round in the unit they show."""

from __future__ import annotations

import re

import pytest

from aiprof.report.common import fmt_bytes, fmt_rate
from aiprof.report.render import render
from aiprof.report.svg import _nice_top
from report_docs import document_of

# A decimal amount of bytes: "12.3 MB", "4 GB", "1.0 kB" that is not a rate ("/s") nor a device's name ("80GB").
_DECIMAL_AMOUNT = re.compile(r"(?<![\w.-])\d+(?:\.\d+)? ?(?:kB|KB|MB|GB|TB)\b(?!/s)")


def test_amounts_are_binary_and_rates_decimal() -> None:
    assert fmt_bytes(1536) == "1.50 KiB"
    assert fmt_bytes(64 * 2**20) == "64.00 MiB"
    assert fmt_bytes(80 * 2**30) == "80.00 GiB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_rate(2.5e9) == "2.5 GB/s" and fmt_rate(3.0e6) == "3.0 MB/s"


def test_a_byte_scale_tops_at_a_round_binary_value() -> None:
    assert _nice_top(3.2 * 2**30, "bytes") == 5 * 2**30  # 5.00 GiB, not 4.66 GiB (5e9 bytes)
    assert fmt_bytes(_nice_top(700 * 2**20, "bytes")) == "1000.0 MiB"
    assert _nice_top(3.2e9, "bytes_per_s") == 5e9  # a rate: decimal


@pytest.mark.parametrize("key", ["dlrm_8rank", "resnet50_nw0"])
@pytest.mark.parametrize("fmt", ["terminal", "md", "html"])
def test_no_report_shows_a_decimal_amount_of_bytes(key: str, fmt: str) -> None:
    """The 8-rank DLRM's collectives carry message sizes (in the HTML's collectives table): they read in MiB."""
    text = render(document_of(key), fmt, width=160)
    text = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)  # the embedded JSON and timeline data
    assert not _DECIMAL_AMOUNT.findall(text)
    if fmt == "html" and key == "dlrm_8rank":
        assert re.search(r"\d (KiB|MiB|GiB)\b", text)

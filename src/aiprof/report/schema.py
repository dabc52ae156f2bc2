"""The JSON Schema of the report file, generated from the typed document (``report.model``).

``src/aiprof/data/report.schema.json`` is this module's output, checked in so that tools without
aiprof can validate a report; a test checks that it equals what the types generate. After changing a
type in ``report/model.py`` (or ``rules.finding.FindingRecord``), regenerate it with::

    python -m aiprof.report.schema > src/aiprof/data/report.schema.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec

from aiprof.report.model import Report

SCHEMA_ID = "https://aiprof.dev/schema/report-1.json"


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :class:`~aiprof.report.model.Report`."""
    generated = msgspec.json.schema(Report)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "aiprof analysis report",
        **generated,
    }


def schema_text() -> str:
    """The schema as the checked-in file holds it (sorted keys, one-space indent, final newline)."""
    return json.dumps(report_schema(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

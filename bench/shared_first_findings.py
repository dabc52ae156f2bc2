"""The first finding of ``aiprof analyze`` on every shared real trace (the list of
``tests/rules/test_rules_real_traces.py``), as one JSON line per trace, so that a change to the rules can
be compared before -> after: ``python bench/shared_first_findings.py > before.jsonl``, change,
``python bench/shared_first_findings.py --diff before.jsonl``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _expected_paths() -> list[str]:
    spec = importlib.util.spec_from_file_location("_real", ROOT / "tests/rules/test_rules_real_traces.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted(module.EXPECTED)


def first_findings(traces: Path) -> list[dict[str, Any]]:
    from aiprof.pipeline import analyze_and_diagnose

    rows: list[dict[str, Any]] = []
    for rel in _expected_paths():
        path = traces / rel
        if not path.exists():
            continue
        _, findings = analyze_and_diagnose([path], workers=1)
        findings = [f.to_dict() for f in findings]  # as the JSON report holds them
        top = findings[0] if findings else None
        rows.append({"trace": rel, "first": top["id"] if top else None,
                     "title": top["title"] if top else None,
                     "saving_ms": round(top["est_saving_ns_per_step"] / 1e6, 3) if top else None,
                     "ids": [f["id"] for f in findings]})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    parser.add_argument("--diff", type=Path, help="a JSONL file written earlier by this script")
    args = parser.parse_args()
    rows = first_findings(args.traces)
    if args.diff is None:
        for row in rows:
            print(json.dumps(row))
        return 0
    before = {r["trace"]: r for r in map(json.loads, args.diff.read_text().splitlines())}
    for row in rows:
        old = before.get(row["trace"], {})
        mark = "  " if old.get("first") == row["first"] else "->"
        print(f"{mark} {row['trace']}: {old.get('first')} -> {row['first']}  ({row['title']})")
        if old.get("ids") != row["ids"]:
            print(f"     ids {old.get('ids')} -> {row['ids']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

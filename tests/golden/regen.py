"""Rewrite ``tests/golden/shared_reports.json`` from the working tree: ``python -m tests.golden.regen``
(``make golden``). Run it after a change that is meant to change reports, and say in the commit message
which traces and sections changed and why; ``--check`` only prints what would change (exit 1 if any)."""

from __future__ import annotations

import json
import sys

from .shared_reports import GOLDEN, SHARED, available, changes, digests, report_bytes


def main(argv: list[str]) -> int:
    check = "--check" in argv
    inputs = available()
    if not inputs:
        print(f"no shared traces at {SHARED}", file=sys.stderr)
        return 2
    old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    new = {}
    for rel in inputs:
        new[rel] = digests(report_bytes(rel))
        for line in changes(rel, old[rel], new[rel]) if rel in old else [f"{rel}: new"]:
            print(line)
    if check:
        return 1 if new != {k: v for k, v in old.items() if k in new} else 0
    GOLDEN.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(new)} inputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

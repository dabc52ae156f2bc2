"""What-if: a trace's dependency graph, its replay, and the step it predicts after an edit (a fix)."""

from __future__ import annotations

"""Fixtures of the report tests. The shared helpers live in ``report_docs`` (a module name of its own:
``from conftest import …`` would bind to whichever ``conftest`` module pytest imported last)."""

from __future__ import annotations

from report_docs import real_doc  # noqa: F401 - the fixture, registered here

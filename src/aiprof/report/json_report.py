"""JSON renderer: the report document itself, versioned (``schema_version``; see docs/json-schema.md)."""

from __future__ import annotations

import json
from typing import Any


class JsonRenderer:
    def __init__(self, indent: int | None = 1) -> None:
        self.indent = indent

    def render(self, doc: dict[str, Any]) -> str:
        return json.dumps(doc, indent=self.indent, ensure_ascii=False, allow_nan=False) + "\n"

"""JSON renderer: the report document itself, versioned (``schema_version``; see docs/json-schema.md)."""

from __future__ import annotations

from typing import Any

import msgspec


class JsonRenderer:
    """UTF-8 JSON, indented by ``indent`` spaces per level (``None``: one compact line). Encoded by
    msgspec (C) straight from the typed document (a ``Report`` or a ``Comparison``), ~10× faster than the
    standard library on a large report. The document holds no NaN or infinity; were one to slip in, it
    would be written as ``null`` (the schema then rejects it)."""

    def __init__(self, indent: int | None = 1) -> None:
        self.indent = indent

    def render(self, doc: msgspec.Struct) -> str:
        raw = encode(doc)
        if self.indent is not None:
            raw = msgspec.json.format(raw, indent=self.indent)
        return raw.decode() + "\n"


def encode(doc: msgspec.Struct) -> bytes:
    """The document as compact JSON bytes (what the HTML report embeds, too)."""
    try:
        return _ENCODER.encode(doc)
    except (TypeError, msgspec.EncodeError) as err:
        raise ValueError(f"the report holds a value that is not JSON: {err}") from err


def _unknown(obj: Any) -> Any:
    """Subclasses of float and int (numpy's float64 is one) as plain numbers; anything else is an error."""
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, int):
        return int(obj)
    raise TypeError(f"cannot encode a {type(obj).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_unknown)

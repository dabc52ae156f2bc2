"""Escaping at the sinks: every string that came from a trace (device, kernel, op, file names, notes,
metadata) passes through one of these before it reaches an output.

- :func:`terminal`: no control character reaches a terminal. C0 controls, DEL and C1 controls (ESC
  sequences, OSC 8 hyperlinks, OSC 52 clipboard writes, BEL, CR, CSI as ``\\x9b``) are made visible:
  C0 and DEL as their Unicode control pictures (``\\x1b`` → ``␛``), the rest as ``\\xNN`` / ``\\uNNNN``;
  bidirectional overrides and line/paragraph separators too, so a name cannot reorder or break a line.
- :func:`terminal_text`: the same as a rich ``Text`` (never parsed as markup: ``[/]x``, ``[rank0]`` and
  ``[link=…]`` print as written); :func:`markup` when a rich markup string is needed.
- :func:`markdown`: inline text for GitHub-flavoured Markdown: a name cannot end a table row (``|``,
  CR/LF), open a code span, a link or image (`` ` ``, ``[``, ``]``, ``!``), raw HTML (``<``, ``>``), a
  heading or list at its start (``#``, ``-``, ``+``, ``=``), bold (``*``), an @mention (``@`` followed by a zero-width space) or an autolink (``://``,
  ``www.``).
- :func:`html`: ``html.escape`` with quotes (the HTML report and its SVG charts).
- :func:`json_script`: JSON text made safe inside an HTML ``<script type="application/json">`` element:
  ``<``, ``>``, ``&`` and the line/paragraph separators as ``\\uXXXX`` escapes, so no string can end the
  element (``</script``), open a comment (``<!--``) or be read as markup; ``JSON.parse`` gives the same data.
"""

from __future__ import annotations

import html as _html
import re

from typing import TYPE_CHECKING

from aiprof.errors import printable as terminal

if TYPE_CHECKING:  # rich is imported by the functions that need it: a JSON or HTML report never does
    from rich.text import Text

__all__ = ["html", "json_script", "markdown", "markup", "terminal", "terminal_text"]


def terminal_text(text: object, style: str = "") -> Text:
    """A rich ``Text`` of ``text`` made safe for a terminal; rich never reads it as markup."""
    from rich.text import Text

    return Text(terminal(text), style=style)


def markup(text: object) -> str:
    """``text`` made safe for a terminal and escaped for rich markup (``[b]`` prints as ``[b]``; print it
    on a console made with ``emoji=False``, as every aiprof console is)."""
    from rich.markup import escape

    return escape(terminal(text))


_MD_SPECIAL = re.compile(r"([\\`*\[\]!|])")
_MD_LEADING = re.compile(r"^(\s*)([#+=-])")  # a heading, list or setext underline at the start (">" becomes &gt;)
_MD_AUTOLINK = re.compile(r"(?i)(://|www\.)")


def markdown(text: object) -> str:
    """Inline Markdown (a table cell, a list item, bold text) that shows ``text`` literally on GitHub."""
    s = terminal(text).replace("\u240d\u240a", " ").replace("\u240a", " ").replace("\u240d", " ")
    s = _MD_LEADING.sub(r"\1\\\2", _MD_SPECIAL.sub(r"\\\1", s))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("@", "@&#8203;")  # no @mention: the zero-width space ends the handle
    return _MD_AUTOLINK.sub(lambda m: m.group(1)[0] + "&#8203;" + m.group(1)[1:], s)


def markdown_code_line(line: str) -> str:
    """One line of an indented code block: Markdown is inert there, raw HTML around it is not."""
    return terminal(line).replace("<", "&lt;").replace(">", "&gt;")


def html(value: object) -> str:
    """``value`` as HTML text or an attribute value."""
    return _html.escape(str(value), quote=True)


_JSON_SCRIPT = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def json_script(text: str) -> str:
    """JSON text (``json.dumps`` / msgspec output) safe as the content of a ``<script type="application/json">``
    (``str.replace`` per character: ~20x ``str.translate``'s speed on a page's MBs of base64)."""
    for char, escaped in _JSON_SCRIPT:
        text = text.replace(char, escaped)
    return text

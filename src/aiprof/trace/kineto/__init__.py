"""The Kineto / Chrome-trace JSON reader (``.json``, ``.json.gz``, a bare event list).

Modules, each importing only those above it (no cycle; ``tests/unit/test_trace_imports.py``):

* :mod:`.schema` — the typed shapes of the JSON (msgspec structs);
* :mod:`.source` — the file's text, sniffed, decompressed a piece at a time and bounded (``LoadLimits``);
* :mod:`.builder` — the column builder every path feeds (events in; columns and side tables out), with
  the native columniser ``_columnar`` (C, optional);
* :mod:`.parallel` — helper processes that build columns from runs of one large file, and the merge;
* :mod:`.stream` — the streaming reader: runs of events cut from the text, decoded here or by helpers;
* :mod:`.loader` — :func:`~aiprof.trace.kineto.loader.load_file`: the stream, else the whole-file path
  (salvage of cut-off files, NaN literals, malformed events).

:class:`aiprof.trace.readers.kineto.KinetoReader` puts it behind the reader interface.
"""

"""``python -m aiprof ...`` is the same as the ``aiprof`` console script."""

from __future__ import annotations

from aiprof.cli import console_main

if __name__ == "__main__":
    console_main()

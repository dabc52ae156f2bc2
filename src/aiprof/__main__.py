"""``python -m aiprof ...`` is the same as the ``aiprof`` console script."""

from __future__ import annotations

import sys

from aiprof.cli import main

if __name__ == "__main__":
    sys.exit(main())

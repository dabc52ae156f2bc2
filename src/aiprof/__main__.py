"""``python -m aiprof ...`` is the same as the ``aiprof`` console script."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    try:
        from aiprof.cli import console_main
    except KeyboardInterrupt:  # Ctrl-C while the CLI module itself is imported
        print("aiprof: interrupted", file=sys.stderr)
        sys.exit(130)
    console_main()

"""`python -m jobs.launch [flags] [overrides]` is `trainstack launch`."""

from __future__ import annotations

import sys

from jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["launch", *sys.argv[1:]]))

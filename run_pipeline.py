#!/usr/bin/env python3
"""framewire's command line from a checkout; installed, the same command is `framewire`."""
from framewire.cli import main

if __name__ == "__main__":  # workers re-import the main module: only the first process runs the CLI
    raise SystemExit(main())

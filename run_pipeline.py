#!/usr/bin/env python3
"""framewire's command line from a checkout; installed, the same command is `framewire`."""
from framewire.cli import main

raise SystemExit(main())

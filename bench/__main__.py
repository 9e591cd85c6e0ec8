"""`python -m bench <what> ...` from a checkout: the same as `run_pipeline.py bench <what> ...`."""

import sys

from framewire.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))

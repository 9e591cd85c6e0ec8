"""Imported last by the fork server (pipeline.forkserver): freezes what its imports made.

A worker is forked from the fork server and shares its pages until it writes to them. Python's
garbage collector writes to every object it examines, so the first full collection in a worker used
to copy the pages of every module the server had imported: 12 MiB more private memory in each
decode worker (docs/results/history.md, "What made it faster"). Frozen objects are never examined.
"""

import gc

gc.freeze()

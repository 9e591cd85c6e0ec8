"""framewire runtime: config, wire format, frame pool, links, workers and the supervisor.

Nothing in this package knows about models, OpenCV or a particular backend.
"""

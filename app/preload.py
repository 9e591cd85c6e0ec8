"""What every worker imports: imported once by the fork server that starts them (pipeline.forkserver).

Kept apart from app.plan so that the CLI can name these modules, and start the fork server on
them, without importing them itself first. A GPU backend's module is left out: it is imported in
the infer worker alone.
"""

PRELOAD = ("app.plan", "engines.onnxruntime")

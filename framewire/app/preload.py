"""What every worker imports: imported once by the fork server that starts them (pipeline.forkserver).

Kept apart from app.compose so that the CLI can name these modules, and start the fork server on
them, without importing them itself first. A GPU backend's module is left out: it is imported in
the infer worker alone.
"""

PRELOAD = (
    "framewire.app.compose.plan",
    "framewire.engines.onnxruntime",
    "onnx",
    "framewire.engines.trt_build",
    "framewire.pipeline.worker.stage",
    "framewire.pipeline.worker.decode",
    "framewire.pipeline.worker.gcfreeze",
)
"""The composition root (every stage, task and source it can build), the CPU backend and the two
worker loops, so a worker imports nothing after it is forked that its siblings do not share; then
`framewire.pipeline.worker.gcfreeze`, last, so its garbage collection leaves those shared pages alone.

`onnx` and `framewire.engines.trt_build` are there because each worker that builds a task or
chooses its backend reads the model's inputs with `onnx` and asks whether TensorRT is installed
(`engines.registry.detect_machine`): 45 and 16 ms of imports in each of them, on the way to the
first frame, otherwise. Neither imports TensorRT or CUDA itself."""

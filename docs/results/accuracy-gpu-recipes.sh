#!/usr/bin/env bash
# fp16 and TensorRT-recipe INT8 models made by framewire, checked on the CPU against fp32 (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
mkdir -p out/models
$PY run_pipeline.py quantize --recipe fp16 -o out/models/yunet-fp16.onnx
$PY run_pipeline.py quantize -c configs/matting.yaml --recipe fp16 -o out/models/u2netp-fp16.onnx
for clip in carphone_pristine bikes bigbuckbunny; do
  $PY run_pipeline.py quantize --recipe tensorrt --video assets/videos/$clip.mp4 --frames 64 \
      -o out/models/yunet-int8-trt-$clip.onnx
  $PY run_pipeline.py bench accuracy --video assets/videos/$clip.mp4 --frames 300 --stride 1 \
      --variants onnxruntime:cpu:fp16,onnxruntime:cpu:int8 --fp16-model out/models/yunet-fp16.onnx \
      --int8-model out/models/yunet-int8-trt-$clip.onnx \
      --json docs/results/accuracy-gpu-recipes-yunet-$clip.json || true
done
$PY run_pipeline.py quantize -c configs/matting.yaml --recipe tensorrt --frames 48 -o out/models/u2netp-int8-trt.onnx
$PY run_pipeline.py bench accuracy -c configs/matting.yaml --frames 20 \
    --variants onnxruntime:cpu:fp16,onnxruntime:cpu:int8 --fp16-model out/models/u2netp-fp16.onnx \
    --int8-model out/models/u2netp-int8-trt.onnx --json docs/results/accuracy-gpu-recipes-u2netp-bikes.json || true

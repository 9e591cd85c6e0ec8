#!/usr/bin/env bash
# fp16 and TensorRT-recipe INT8 models made by framewire, checked on the CPU against fp32 (docs/gpu.md,
# "Accuracy of the GPU recipes"). The quantize lines go to docs/results/accuracy-gpu-recipes.log.
#
# YuNet, for each shipped clip: INT8 calibrated on 64 frames of the clip, (1) all int8, (2) with
# --auto-fp32 checked on 64 frames spread over the clip, (3) with --auto-fp32 checked on every frame;
# then one model for the three clips, checked on every frame of each. bench accuracy runs on every
# frame. U²-Netp: calibrated on 48 frames of bikes.mp4, checked on the 20 frames bench accuracy uses,
# benched on those and on 50.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
LOG=docs/results/accuracy-gpu-recipes.log
mkdir -p out/models
: > "$LOG"
q() { $PY run_pipeline.py quantize "$@" 2>&1 | tee -a "$LOG"; }
acc() { $PY run_pipeline.py bench accuracy "$@" || true; }
q --recipe fp16 -o out/models/yunet-fp16.onnx
q -c configs/matting.yaml --recipe fp16 -o out/models/u2netp-fp16.onnx
for clip in carphone_pristine bikes bigbuckbunny; do
  video=assets/videos/$clip.mp4
  q --recipe tensorrt --video $video --frames 64 -o out/models/yunet-int8-trt-$clip.onnx
  acc --video $video --frames 300 --stride 1 --variants onnxruntime:cpu:fp16,onnxruntime:cpu:int8 \
      --fp16-model out/models/yunet-fp16.onnx --int8-model out/models/yunet-int8-trt-$clip.onnx \
      --json docs/results/accuracy-gpu-recipes-yunet-$clip.json
  for check in 64 300; do
    q --recipe tensorrt --video $video --frames 64 --auto-fp32 --check-frames $check \
        -o out/models/yunet-int8-auto$check-$clip.onnx
    acc --video $video --frames 300 --stride 1 --variants onnxruntime:cpu:int8 \
        --int8-model out/models/yunet-int8-auto$check-$clip.onnx \
        --json docs/results/accuracy-gpu-recipes-yunet-auto$check-$clip.json
  done
done
q --recipe tensorrt --video assets/videos/carphone_pristine.mp4 --video assets/videos/bikes.mp4 \
    --video assets/videos/bigbuckbunny.mp4 --frames 96 --auto-fp32 --check-frames 750 \
    -o out/models/yunet-int8-auto-three.onnx
for clip in carphone_pristine bikes bigbuckbunny; do
  acc --video assets/videos/$clip.mp4 --frames 300 --stride 1 --variants onnxruntime:cpu:int8 \
      --int8-model out/models/yunet-int8-auto-three.onnx \
      --json docs/results/accuracy-gpu-recipes-yunet-auto-three-$clip.json
done
q -c configs/matting.yaml --recipe tensorrt --frames 48 -o out/models/u2netp-int8-trt.onnx
acc -c configs/matting.yaml --frames 20 --variants onnxruntime:cpu:fp16,onnxruntime:cpu:int8 \
    --fp16-model out/models/u2netp-fp16.onnx --int8-model out/models/u2netp-int8-trt.onnx \
    --json docs/results/accuracy-gpu-recipes-u2netp-bikes.json
q -c configs/matting.yaml --recipe tensorrt --frames 48 --auto-fp32 --check-frames 20 \
    -o out/models/u2netp-int8-auto.onnx
for frames in 20 50; do
  acc -c configs/matting.yaml --frames $frames --variants onnxruntime:cpu:int8 \
      --int8-model out/models/u2netp-int8-auto.onnx \
      --json docs/results/accuracy-gpu-recipes-u2netp-auto-bikes-$frames.json
done

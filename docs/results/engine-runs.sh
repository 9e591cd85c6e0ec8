#!/bin/bash
# Measurements for docs/benchmarks.md (Engines, INT8 on the CPU, Dynamic batching).
# Run from anywhere; writes docs/results/engine-*.json (the charts go to out/bench/).
cd "$(dirname "$0")/../.."
.venv/bin/python run_pipeline.py quantize -c configs/default.yaml --video assets/videos/bikes.mp4 --output out/models/yunet-int8.onnx
.venv/bin/python run_pipeline.py quantize -c configs/matting.yaml --frames 16 --output out/models/u2netp-int8.onnx
B=".venv/bin/python run_pipeline.py bench engine -c configs/default.yaml --int8-model out/models/yunet-int8.onnx --max-load 1.0 --max-wait 45 --seconds 2"
V="--variants onnxruntime:cpu:fp32,onnxruntime:cpu:int8"
for t in 1 2; do
  $B $V --video assets/videos/bikes.mp4 --set 'model.input_size=[640,640]' --batches 1 --repeat 7 --threads $t --json docs/results/engine-int8-640-t$t.json
  $B $V --video assets/videos/bikes.mp4 --batches 1 --repeat 7 --threads $t --json docs/results/engine-int8-bikes-t$t.json
  $B $V --video assets/videos/carphone_pristine.mp4 --batches 1 --repeat 7 --threads $t --json docs/results/engine-int8-carphone-t$t.json
done
for t in 1 2; do
  $B $V --video assets/videos/carphone_pristine.mp4 --batches 1,2,4,8 --repeat 3 --threads $t --json docs/results/engine-batch-carphone-t$t.json --chart out/bench/engine-batch-carphone-t$t.png
  $B $V --video assets/videos/bikes.mp4 --batches 1,2,4,8 --repeat 3 --threads $t --json docs/results/engine-batch-bikes-t$t.json --chart out/bench/engine-batch-bikes-t$t.png
done
.venv/bin/python run_pipeline.py bench engine -c configs/matting.yaml --variants onnxruntime:cpu:fp32,onnxruntime:cpu:int8 \
  --int8-model out/models/u2netp-int8.onnx --batches 1 --frames 4 --warmup 2 --min-iterations 8 --seconds 2 --repeat 3 \
  --threads 1 --max-load 1.0 --max-wait 30 --json docs/results/engine-int8-u2netp-t1.json
.venv/bin/python run_pipeline.py quantize -c configs/nanodet.yaml --video assets/videos/bikes.mp4 --frames 64 --output out/models/nanodet-int8.onnx
.venv/bin/python run_pipeline.py bench engine -c configs/nanodet.yaml --video assets/videos/bikes.mp4 --variants onnxruntime:cpu:fp32,onnxruntime:cpu:int8 \
  --int8-model out/models/nanodet-int8.onnx --batches 1 --repeat 3 --seconds 2 --threads 1 --json docs/results/engine-nanodet-t1.json
.venv/bin/python run_pipeline.py bench engine -c configs/ssd.yaml --video assets/videos/bikes.mp4 --variants onnxruntime:cpu:fp32 \
  --batches 1 --repeat 3 --seconds 2 --threads 1 --json docs/results/engine-ssd-t1.json
echo done

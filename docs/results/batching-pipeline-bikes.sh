#!/bin/bash
# Whole-pipeline measurement of dynamic batching (docs/benchmarks.md, "Dynamic batching").
cd "$(dirname "$0")/../.."
wait_quiet() { for i in $(seq 1 24); do l=$(cut -d' ' -f1 /proc/loadavg); awk "BEGIN{exit !($l < 1.0)}" && return; sleep 5; done; }
SRC=""
for i in 0 1 2 3; do SRC="$SRC --set sources.$i.id=b$i --set sources.$i.uri=assets/videos/bikes.mp4"; done
OUTS='outputs=[{kind: jsonl, path: "out/bench/pipe/{source_id}.jsonl"}]'
COMMON="run -c configs/default.yaml $SRC --set composite=[] --no-progress"
for layout in "1 2" "2 1"; do
  set -- $layout; procs=$1; threads=$2
  for rep in 1 2 3; do
    for mb in 1 4; do
      wait_quiet
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      line=$(.venv/bin/python run_pipeline.py $COMMON --set "$OUTS" --set engine.processes_per_device=$procs --set engine.threads=$threads --set engine.max_batch=$mb --set engine.max_delay_ms=5 2>&1 | grep "^framewire:")
      echo "procs=$procs threads=$threads max_batch=$mb rep=$rep load=[$load] $line"
    done
  done
done

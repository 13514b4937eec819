#!/usr/bin/env bash
# The experiment behind results/h200-vllm-unit/: the steady workload's 16-stream point under its own protocol and
# under the sweep's, on one H200, real vLLM 0.25.0; then 32 streams over a 60 s window. From the repository root;
# device calls back to back:
#   1-6. bash results/h200-vllm/run_on_h200.sh stash     carry .gpu and .vllm/partN (one part per call); the first call
#        starts building the random 8B model in the background
#   7.   bash results/h200-vllm-unit/run_on_h200.sh unit      carry .gpu; spec-unit.json (12 load points)
#   8.   bash results/h200-vllm-unit/run_on_h200.sh c32long   carry .gpu; spec-c32long.json (2 load points)
# The measuring itself is results/h200-vllm/run_on_h200.sh's (unpack, facts, the bench agent, the bundle to $OUT).
set -uo pipefail
phase=${1:?usage: run_on_h200.sh unit|c32long}
HERE=results/h200-vllm-unit bash results/h200-vllm/run_on_h200.sh "$phase"

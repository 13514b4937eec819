#!/usr/bin/env bash
# The experiment behind results/h200-vllm-board/: the typical-board twin tested on an H200 it has not seen, its figures
# filed before the run (predictions.json). From the repository root; device calls back to back:
#   1-8. bash results/h200-vllm/run_on_h200.sh stash     carry .gpu and .vllm/partN (one part per call); the first call
#        starts building the random 8B model in the background
#   9.   bash results/h200-vllm-board/run_on_h200.sh board   carry .gpu; spec-board.json (18 load points: 16, 4, 64 streams)
#   10.  bash results/h200-vllm-board/run_on_h200.sh mix     carry .gpu; spec-mix.json (12 load points: 2K prompts, gamma)
# The measuring itself is results/h200-vllm/run_on_h200.sh's (unpack, facts, the bench agent, the bundle to $OUT).
set -uo pipefail
phase=${1:?usage: run_on_h200.sh board|mix}
HERE=results/h200-vllm-board bash results/h200-vllm/run_on_h200.sh "$phase"

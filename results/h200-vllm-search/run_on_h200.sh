#!/usr/bin/env bash
# The SLO capacity search of plans/h200-vllm-search.yaml on the lent H200 (real vLLM 0.25.0, bf16 and fp8 loaded
# together on GPU 0, the seeded 8B model). From the repository root, device calls back to back:
#   1-8. bash results/h200-vllm/run_on_h200.sh stash      carry .gpu and .vllm/partN (one part per call); the first
#        call starts building the random 8B model in the background
#   9.   bash results/h200-vllm-search/run_on_h200.sh search   carry .gpu; spec-search.json (one search per engine:
#        at most 12 probes and 170 s each, 10 s windows)
# spec-search.json was written by `wattbench spec --plan plans/h200-vllm-search.yaml --run-id h200-vllm-search-1
# --out /tmp/bundle-search --write results/h200-vllm-search/spec-search.json`. Then, here: `wattbench ingest
# bundle-search.tar.xz --plan plans/h200-vllm-search.yaml` and `wattbench sql slo_capacity`.
set -uo pipefail
phase=${1:?usage: run_on_h200.sh search}
HERE=results/h200-vllm-search bash results/h200-vllm/run_on_h200.sh "$phase"

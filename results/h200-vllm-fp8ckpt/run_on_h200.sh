#!/usr/bin/env bash
# The experiment behind results/h200-vllm-fp8ckpt/: online fp8 against a pre-quantized fp8 checkpoint, real vLLM
# 0.25.0 on the lent H200, run from the repository root. Device calls, back to back:
#   1-6. bash results/h200-vllm-fp8ckpt/run_on_h200.sh stash     carry .gpu and .vllm/partN (one part per call); the
#        first call starts building the random 8B model and then its fp8 copy (mkfp8.py) in the background
#   7.   bash results/h200-vllm-fp8ckpt/run_on_h200.sh fp8ckpt   carry .gpu; spec-fp8ckpt.json (18 load points)
#   8.   bash results/h200-vllm-fp8ckpt/run_on_h200.sh decode-fp8  carry .gpu; the fp8 half of the decode-heavy
#        phase of results/h200-vllm-sweep (spec-decode-fp8.json there)
# The measuring itself is results/h200-vllm/run_on_h200.sh's (unpack, facts, the bench agent, the bundle to $OUT).
set -uo pipefail
phase=${1:?usage: run_on_h200.sh stash|fp8ckpt|decode-fp8}
HERE=results/h200-vllm-fp8ckpt
SRC=/tmp/wattbench-llama8b
CKPT=/tmp/wattbench-llama8b-fp8
case "$phase" in
  stash)
    bash results/h200-vllm/run_on_h200.sh stash
    if [ ! -e /tmp/fp8.started ]; then
      touch /tmp/fp8.started
      setsid nohup bash -c "for _ in \$(seq 1 600); do [ -e $SRC/.ok ] && break; sleep 1; done; \
        python3 $HERE/mkfp8.py $SRC $CKPT && touch $CKPT/.ok" > /tmp/fp8.log 2>&1 < /dev/null &
    fi
    tail -2 /tmp/fp8.log 2>/dev/null; exit 0 ;;
  fp8ckpt)
    if [ -n "${REBUILD:-}" ]; then rm -rf $CKPT; python3 $HERE/mkfp8.py $SRC $CKPT > /tmp/fp8.log 2>&1 && touch $CKPT/.ok; fi
    for _ in $(seq 1 300); do [ -e $CKPT/.ok ] && break; sleep 1; done
    [ -e $CKPT/.ok ] || { echo "fp8 checkpoint not built:"; tail -20 /tmp/model.log /tmp/fp8.log; exit 1; }
    mkdir -p "${OUT:-/tmp/out}"; cp /tmp/fp8.log "${OUT:-/tmp/out}/mkfp8.log"; cp $CKPT/config.json "${OUT:-/tmp/out}/fp8-config.json"
    HERE=$HERE bash results/h200-vllm/run_on_h200.sh fp8ckpt ;;
  decode-fp8)
    HERE=results/h200-vllm-sweep bash results/h200-vllm/run_on_h200.sh decode-fp8 ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac

#!/usr/bin/env bash
# The experiment behind results/h200-vllm-steps/ (plans/h200-vllm-steps.yaml), from the repository root, device calls
# back to back (the machine goes back after ~30 s idle):
#   1-4. bash results/h200-vllm-steps/run_on_h200.sh stash    carry .gpu and .vllm/partN (one part per call); the first
#        call starts building the seeded random 8B model (WATTBENCH_MODEL_SEED 0) in the background
#   5.   bash results/h200-vllm-steps/run_on_h200.sh measure PHASE   carry .gpu; copies the checkout to /tmp/wb and
#        starts results/h200-vllm/run_on_h200.sh PHASE there in a session of its own (spec-PHASE.json: 24 load
#        points, ~10 minutes with the servers' start, longer than one call may last), then waits for it
#   6.   bash results/h200-vllm-steps/run_on_h200.sh collect PHASE   waits for it to end; both bring $OUT back
# PHASE may name several phases run one after the other in that one background job, e.g. "gpu2 search" (the second
# GPU's run, then plans/h200-vllm-search.yaml's capacity search from results/h200-vllm-search/spec-search.json); what
# has been written so far comes back at every call, all of it once "== all done" is in measure.log.
# .gpu holds ../shared/gpu/vllm-h200/{stash.sh,unpack.sh,mkmodel.py,mktok_words.py}; .vllm the vLLM pack's parts.
set -uo pipefail
verb=${1:?usage: run_on_h200.sh stash | measure PHASE | collect PHASE}
HERE=results/h200-vllm-steps
if [ "$verb" = stash ]; then
  exec bash results/h200-vllm/run_on_h200.sh stash
fi
phases=${2:?PHASE}
work=/tmp/out-${phases// /-}
if [ "$verb" = measure ]; then
  # the checkout is laid afresh at every call: the measuring runs from a copy of its own
  rm -rf /tmp/wb && mkdir -p /tmp/wb "$work" && cp -r agent results .gpu /tmp/wb/
  (cd /tmp/wb && OUT=$work AGENT_TIMEOUT_S=1500 setsid nohup bash -c '
    for ph in '"$phases"'; do
      here=results/h200-vllm-steps; [ "$ph" = search ] && here=results/h200-vllm-search
      HERE=$here bash results/h200-vllm/run_on_h200.sh "$ph"
    done; echo "== all done"' > "$work/measure.log" 2>&1 < /dev/null & echo $! > /tmp/measure.pid)
fi
deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  grep -q "== all done" "$work/measure.log" 2>/dev/null && break
  sleep 5
done
tail -8 "$work/measure.log"
cp "$work"/* "${OUT:?}/" 2>/dev/null
ls -la "$OUT"

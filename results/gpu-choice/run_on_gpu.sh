#!/usr/bin/env bash
# The experiment behind results/gpu-choice/ (plans/gpu-choice-h100.yaml, plans/gpu-choice-h200.yaml): one device
# machine of one kind at a time, calls back to back from the repository root (the machine goes back after ~30 s idle):
#   1-4. bash results/gpu-choice/run_on_gpu.sh stash           carry .gpu and .vllm/partN (one part per call); the
#        first call starts building the seeded random 8B model (WATTBENCH_MODEL_SEED 0) in the background
#   5.   bash results/gpu-choice/run_on_gpu.sh measure KIND    KIND h100 or h200, carry .gpu: copies what the run needs
#        to /tmp/wb and starts results/h200-vllm/run_on_h200.sh KIND there in a session of its own (spec-KIND.json:
#        30 load points with two capacity searches, about 9 minutes with the servers' start, longer than one call),
#        then waits up to WAIT_S (default 540 s)
#   6.   bash results/gpu-choice/run_on_gpu.sh collect KIND    waits for it to end; every call brings back what has
#        been written so far ($OUT: facts, the agent's log, and once done the bundle)
# .gpu holds ../shared/gpu/vllm-h200/{stash.sh,unpack.sh,mkmodel.py,mktok_words.py}; .vllm the vLLM pack's parts.
set -uo pipefail
verb=${1:?usage: run_on_gpu.sh stash | measure KIND | collect KIND}
if [ "$verb" = stash ]; then
  exec bash results/h200-vllm/run_on_h200.sh stash
fi
kind=${2:?KIND: h100 or h200}
work=/tmp/out-$kind
if [ "$verb" = measure ]; then
  # the checkout is laid afresh at every call: the measuring runs from a copy of its own
  rm -rf /tmp/wb && mkdir -p /tmp/wb/results "$work" && cp -r agent .gpu /tmp/wb/ \
    && cp -r results/h200-vllm results/gpu-choice /tmp/wb/results/
  {
    date -u; uname -r
    nvidia-smi --query-gpu=name,uuid,serial,vbios_version,driver_version,pcie.link.gen.max,pcie.link.width.max,power.limit,power.default_limit,power.max_limit,enforced.power.limit,memory.total,persistence_mode,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,clocks.applications.graphics,temperature.gpu,compute_mode,mig.mode.current --format=csv
    lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA node\(s\)|MHz'
  } > "$work/host-$kind.txt" 2>&1
  (cd /tmp/wb && OUT=$work AGENT_TIMEOUT_S=1200 HERE=results/gpu-choice setsid nohup bash -c \
    'bash results/h200-vllm/run_on_h200.sh '"$kind"'; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > '"$work"'/nvsmi-after-'"$kind"'.txt 2>&1; echo "== all done"' \
    > "$work/measure.log" 2>&1 < /dev/null & echo $! > /tmp/measure.pid)
fi
deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  grep -q "== all done" "$work/measure.log" 2>/dev/null && break
  sleep 5
done
tail -12 "$work/measure.log"
cp "$work"/* "${OUT:?}/" 2>/dev/null
ls -la "$OUT"

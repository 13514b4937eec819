#!/usr/bin/env bash
# The experiment behind results/h200-vllm/: real vLLM 0.25.0 on the lent H200 (Python 3.12, torch 2.11, no network),
# run from the repository root. The device calls, in order, back to back (the machine goes back after ~30 s idle):
#   1-4. bash results/h200-vllm/run_on_h200.sh stash          carry .gpu and .vllm/partN (one part per call); the
#        first call also starts building the random 8B model in the background
#   5.   bash results/h200-vllm/run_on_h200.sh steady         carry .gpu; spec-steady.json (18 load points)
#   6.   bash results/h200-vllm/run_on_h200.sh long-bursty    carry .gpu; spec-long-bursty.json (12 load points),
#        then `vllm bench serve` and `wattbench-agent load` against one more bf16 server, side by side
#   (a later session) bash results/h200-vllm/run_on_h200.sh light   carry .gpu; spec-light.json (12 load points:
#        1 and 4 streams), light-long (2K-token prompts), kv8 (plans/h200-vllm-kv8.yaml), after the stash calls
# .gpu holds ../shared/gpu/vllm-h200/{stash.sh,unpack.sh,mkmodel.py,mktok_words.py}; .vllm the vLLM pack's parts
# (build_pack.sh). The specs were written by `wattbench spec --plan plans/h200-vllm.yaml --workload ...`.
# Writes to $OUT: the bundle (tar.xz), the agent's log, GPU facts, and for long-bursty the peer comparison files.
set -uo pipefail
# SIZE=14b HERE=results/h200-vllm-14b runs the held-out model's phases (light, heavy) the same way
SIZE=${SIZE:-8b}
HERE=${HERE:-results/h200-vllm}
GPU=.gpu
MODEL=/tmp/wattbench-llama$SIZE
TOK=/tmp/wattbench-tok
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
phase=${1:?usage: [SIZE=14b HERE=results/h200-vllm-14b] run_on_h200.sh stash|steady|long-bursty|light|light-long|kv8|heavy}

if [ "$phase" = stash ]; then
  bash "$GPU/stash.sh" .vllm
  if [ ! -e /tmp/model.started ]; then
    touch /tmp/model.started
    setsid nohup bash -c "python3 $GPU/mktok_words.py $TOK && python3 $GPU/mkmodel.py $MODEL $SIZE $TOK && touch $MODEL/.ok" \
      > /tmp/model.log 2>&1 < /dev/null &
  fi
  tail -3 /tmp/model.log 2>/dev/null
  exit 0
fi

t0=$(date +%s)
source "$GPU/unpack.sh" || exit 1
echo "== unpacked in $(( $(date +%s) - t0 )) s"
for _ in $(seq 1 240); do [ -e "$MODEL/.ok" ] && break; sleep 1; done
[ -e "$MODEL/.ok" ] || { echo "model not built:"; tail -20 /tmp/model.log; exit 1; }
python3 -c "import prometheus_client" 2>/dev/null || echo "prometheus_client missing on this node"
export PYTHONPATH=$PWD/agent:$PYTHONPATH PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,memory.total,persistence_mode,clocks.max.sm --format=csv
  python3 -c "import torch, vllm, prometheus_client, httpx; print('torch', torch.__version__, 'vllm', vllm.__version__, 'httpx', httpx.__version__)"
  nproc; free -g | head -2
} > "$OUT/facts-$phase.txt" 2>&1
cp "$MODEL/config.json" "$OUT/config.json" 2>/dev/null
cat "$OUT/facts-$phase.txt"

echo "== bench agent: $HERE/spec-$phase.json"
rm -rf "/tmp/bundle-$phase"
timeout ${AGENT_TIMEOUT_S:-520} python3 -m wattbench_agent --spec "$HERE/spec-$phase.json" --out "/tmp/bundle-$phase" 2>&1 \
  | tee "$OUT/agent-$phase.log" | grep -v "^\[.*\] load point" | tail -60
tar cf - -C /tmp "bundle-$phase" | xz -T0 -6 > "$OUT/bundle-$phase.tar.xz"
echo "== agent done at $(( $(date +%s) - t0 )) s; bundle $(du -h "$OUT/bundle-$phase.tar.xz" | cut -f1)"

if [ "$phase" = long-bursty ]; then
  # The peer, side by side on the same real engine: vLLM's own benchmark client, then wattbench's, same load.
  port=8123
  VLLM_USE_FLASHINFER_SAMPLER=0 CUDA_VISIBLE_DEVICES=0 vllm serve "$MODEL" --host 127.0.0.1 --port $port \
    --dtype bfloat16 --served-model-name llama-8b-random --max-model-len 4096 --max-num-seqs 256 \
    --gpu-memory-utilization 0.4 --kv-cache-memory-bytes 25769803776 > /tmp/vllm-serve.log 2>&1 &
  for _ in $(seq 1 200); do curl -sf localhost:$port/health >/dev/null && break; sleep 1; done
  echo "== peer server up at $(( $(date +%s) - t0 )) s"
  curl -s localhost:$port/version > "$OUT/vllm-version.json"
  timeout 90 vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --base-url http://127.0.0.1:$port \
    --model llama-8b-random --tokenizer "$MODEL" --dataset-name random --random-input-len 512 --random-output-len 128 \
    --num-prompts 400 --max-concurrency 64 --ignore-eos --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --save-detailed --result-dir "$OUT" \
    --result-filename vllm-bench-serve-0.25.0.json 2>&1 | tail -30
  timeout 90 python3 -m wattbench_agent load --url http://127.0.0.1:$port --model llama-8b-random --api chat \
    --concurrency 64 --input-tokens 512 --output-tokens 128 --max-requests 400 --duration 300 \
    --out /tmp/wattbench-load-requests.jsonl --json > "$OUT/wattbench-load.json" 2> /tmp/wattbench-load.err
  tail -3 /tmp/wattbench-load.err
  curl -s localhost:$port/metrics > "$OUT/vllm-metrics-0.25.0.txt"
  kill %1 2>/dev/null; wait
  cp /tmp/vllm-serve.log "$OUT/vllm-serve-0.25.0.log"
fi
ls -la "$OUT"; echo "== done at $(( $(date +%s) - t0 )) s"

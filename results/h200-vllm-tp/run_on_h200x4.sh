#!/usr/bin/env bash
# Tensor-parallel vLLM on 4 H200s of one host (plans/h200-vllm-tp.yaml), run from the repository root on the
# device kind nvidia-h200-x4. Ready to run; not run yet (that kind has not been lent). The device calls, in order,
# back to back (the machine goes back after ~30 s idle):
#   1-5. bash results/h200-vllm-tp/run_on_h200x4.sh stash                  carry .gpu and .vllm/partN (one per call)
#   6.   bash results/h200-vllm-tp/run_on_h200x4.sh vllm-tp1-a,vllm-tp1-b  the two TP-1 replicas side by side
#   7.   bash results/h200-vllm-tp/run_on_h200x4.sh vllm-tp2               TP 2 on GPUs 0,1
#   8.   bash results/h200-vllm-tp/run_on_h200x4.sh vllm-tp4               TP 4 on all four
# Each call after the stashes runs the deployments it names from spec.json (written here by
#   wattbench spec --plan plans/h200-vllm-tp.yaml --run-id h200-vllm-tp --out /tmp/bundle-tp \
#     --write results/h200-vllm-tp/spec.json),
# one call per group so each stays inside the 600 s a call may take (each group is a run of its own, run id
# h200-vllm-tp-GROUP; compare them with `wattbench report --compare`); then here, for each bundle:
#   wattbench ingest results/h200-vllm-tp/bundle-GROUP.tar.xz --plan plans/h200-vllm-tp.yaml
# .gpu holds ../shared/gpu/vllm-h200/{stash.sh,unpack.sh,mkmodel.py,mktok_words.py}; .vllm the vLLM pack's parts.
set -uo pipefail
HERE=results/h200-vllm-tp
GPU=.gpu
MODEL=/tmp/wattbench-llama8b
TOK=/tmp/wattbench-tok
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
group=${1:?usage: run_on_h200x4.sh stash | DEPLOYMENT[,DEPLOYMENT...]}

if [ "$group" = stash ]; then
  bash "$GPU/stash.sh" .vllm
  if [ ! -e /tmp/model.started ]; then
    touch /tmp/model.started
    setsid nohup bash -c "python3 $GPU/mktok_words.py $TOK && python3 $GPU/mkmodel.py $MODEL 8b $TOK && touch $MODEL/.ok" \
      > /tmp/model.log 2>&1 < /dev/null &
  fi
  tail -3 /tmp/model.log 2>/dev/null
  exit 0
fi

t0=$(date +%s)
source "$GPU/unpack.sh" || exit 1
for _ in $(seq 1 240); do [ -e "$MODEL/.ok" ] && break; sleep 1; done
[ -e "$MODEL/.ok" ] || { echo "model not built:"; tail -20 /tmp/model.log; exit 1; }
export PYTHONPATH=$PWD/agent:$PYTHONPATH PYTHONUNBUFFERED=1
name=${group//,/+}
{
  date -u
  nvidia-smi --query-gpu=index,name,uuid,driver_version,power.limit,memory.total,clocks.max.sm --format=csv
  nvidia-smi topo -m
  python3 -c "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__, 'gpus', torch.cuda.device_count())"
} > "$OUT/facts-$name.txt" 2>&1
cat "$OUT/facts-$name.txt"
# the group's deployments only, its own bundle folder
python3 - "$HERE/spec.json" "$group" "/tmp/bundle-$name" > "/tmp/spec-$name.json" <<'PY'
import json, sys
spec, keep, out = json.load(open(sys.argv[1])), sys.argv[2].split(","), sys.argv[3]
spec["deployments"] = [d for d in spec["deployments"] if d["deployment_id"] in keep]
missing = sorted(set(keep) - {d["deployment_id"] for d in spec["deployments"]})
if missing:
    sys.exit(f"spec.json has no deployment {', '.join(missing)}")
spec["out"] = out
spec["run_id"] = f"{spec['run_id']}-{out.rsplit('/bundle-', 1)[1]}"   # one run per call: a bundle is one run
print(json.dumps(spec))
PY
[ -s "/tmp/spec-$name.json" ] || exit 1
rm -rf "/tmp/bundle-$name"
timeout 540 python3 -m wattbench_agent --spec "/tmp/spec-$name.json" --out "/tmp/bundle-$name" 2>&1 \
  | tee "$OUT/agent-$name.log" | grep -v "^\[.*\] load point" | tail -60
tar cf - -C /tmp "bundle-$name" | xz -T0 -6 > "$OUT/bundle-$name.tar.xz"
ls -la "$OUT"; echo "== done at $(( $(date +%s) - t0 )) s"

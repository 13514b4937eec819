#!/usr/bin/env bash
# The experiment behind results/h200-transformers/: run on the lent H200 machine (Python 3.12, torch and
# transformers installed, no network) from the repository root, with the wheels of .whl/ carried along.
# Writes to $OUT: the result bundle (tarred), an NVML recording for the fake-NVML tests, and GPU facts.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_CACHE=/tmp/hfcache
mkdir -p /tmp/hfcache
{
  nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,memory.total,persistence_mode --format=csv
  nvidia-smi --help-query-gpu | grep -i -A2 energy
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} > "$OUT/gpu_facts.txt" 2>&1
cat "$OUT/gpu_facts.txt"
echo "== building the random 1B model"; t0=$(date +%s)
python3 -m wattbench_agent.engines.tiny_model --out /tmp/wattbench-tiny-1b --size 1b 2>&1 | tail -3
echo "   took $(( $(date +%s) - t0 )) s"
if [ "${RECORD:-1}" = 1 ]; then
  echo "== NVML recording for the fake-NVML tests (idle, then a bf16 matmul loop)"
  timeout 90 python3 -m wattbench_agent.telemetry.cli telemetry record --seconds 24 --load matmul --out "$OUT/h200_trace.json" 2>&1 | tail -5
fi
python3 -c "import sklearn, zeus; print('zeus', zeus.__version__, 'sklearn', sklearn.__version__)" 2>&1 | tail -1
echo "== bench agent: transformers serve, concurrency 1/16/64/256, 20 s windows, NVML at 10 Hz"
rm -rf /tmp/bundle
timeout 480 python3 -m wattbench_agent --spec results/h200-transformers/spec.json --out /tmp/bundle 2>&1 | tail -40
tar czf "$OUT/bundle.tgz" -C /tmp bundle
ls -la "$OUT"

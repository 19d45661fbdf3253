#!/usr/bin/env bash
# One device call: the machine, the GPU test tier, then each benchmark command given as an
# argument; every log under $OUT (default /tmp/tilus-gpu), a short table printed last.
set -u
OUT=${OUT:-/tmp/tilus-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILUS_CACHE_DIR=${TILUS_CACHE_DIR:-/tmp/tilus-cache}
export TILUS_SEED_KERNELS=${TILUS_SEED_KERNELS:-$PWD/.seed_kernels}
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
start=$(date +%s)
python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | sed "s#$PWD/##g" > "$OUT/gpu-tests.txt"
echo "gpu tier: $(tail -1 "$OUT/gpu-tests.txt") ($(( $(date +%s) - start )) s)" | tee "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$OUT/gpu-tests.txt" | head -40
n=0
for cmd in "$@"; do
  n=$((n + 1))
  start=$(date +%s)
  bash -c "$cmd" > "$OUT/bench$n.txt" 2>&1
  echo "bench$n rc=$? ($(( $(date +%s) - start )) s): $cmd" | tee -a "$OUT/summary.txt"
  tail -25 "$OUT/bench$n.txt"
done
cat "$OUT/summary.txt"

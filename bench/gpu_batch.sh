#!/usr/bin/env bash
# One device call: the machine, the GPU test tier, then each benchmark command given as an
# argument; every log under $OUT (default /tmp/tilus-gpu), a short table printed last.
# SHARDS=N runs the tier in N processes at once; SKIP_TIER=1 runs only the commands;
# TIER_FILES narrows the tier to some test files.
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
# The tier in SHARDS pytest processes at once (default 4): the tests are quick on the GPU and
# most of their time is NVRTC on the host's cores. The GPU tests are collected once and dealt
# out one by one (a shard takes every SHARDS-th test), so one slow file does not hold up the run.
SHARDS=${SHARDS:-4}
if [ "${SKIP_TIER:-0}" != 1 ]; then
  # TIER_FILES="a.py b.py" runs only those files' GPU tests
  files=${TIER_FILES:-$(grep -rlE "pytest.mark.gpu|pytestmark = pytest.mark.gpu" tests --include="test_*.py" | sort)}
  # shellcheck disable=SC2086
  python3 -m pytest -q -m gpu -p no:cacheprovider --collect-only $files 2>/dev/null \
    | grep "::" > "$OUT/gpu-test-ids.txt"
  echo "gpu tier: $(wc -l < "$OUT/gpu-test-ids.txt") tests in $SHARDS shards"
  for i in $(seq 0 $((SHARDS - 1))); do
    awk -v n="$SHARDS" -v i="$i" 'NR % n == i' "$OUT/gpu-test-ids.txt" > "$OUT/gpu-ids-$i.txt"
    # one id a line (ids may hold spaces): xargs hands them over as they are
    # (-r: an empty shard, when there are fewer tests than shards, runs nothing, not the tier)
    tr '\n' '\0' < "$OUT/gpu-ids-$i.txt" | xargs -0 -r python3 -m pytest -q -m gpu \
      -p no:cacheprovider -rfE > "$OUT/gpu-tests-$i.txt" 2>&1 &
  done
  wait
  rm -f "$OUT"/gpu-ids-*.txt "$OUT/gpu-test-ids.txt"
  cat "$OUT"/gpu-tests-*.txt | sed "s#$PWD/##g" > "$OUT/gpu-tests.txt"
  rm -f "$OUT"/gpu-tests-*.txt
  tot=$(grep -hE "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)" "$OUT/gpu-tests.txt" | tr '\n' ' ')
  echo "gpu tier ($SHARDS shards): $tot ($(( $(date +%s) - start )) s)" | tee "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR)" "$OUT/gpu-tests.txt" | head -40
fi
n=0
for cmd in "$@"; do
  n=$((n + 1))
  start=$(date +%s)
  bash -c "$cmd" > "$OUT/bench$n.txt" 2>&1
  echo "bench$n rc=$? ($(( $(date +%s) - start )) s): $cmd" | tee -a "$OUT/summary.txt"
  tail -25 "$OUT/bench$n.txt"
done
cat "$OUT/summary.txt"

#!/bin/sh
# The GPU suite in one go, for a machine with an NVIDIA GPU (sized for an
# H200: about 4-5 minutes; every step is time-boxed and the whole run stays
# within SUITE_BUDGET seconds, 460 by default):
#   1. build Release with the CUDA backend (the log must show nvcc at work),
#   2. check the plugin loads and sees the GPU,
#   3. ctest -L gpu (C tests of the plugin and of NCCL at world size 1),
#   4. busted --tags=gpu tests/gpu (every op vs the CPU, nn layers, mixed
#      precision, nccl, the cpu group with CUDA tensors, DDP equivalence,
#      Fashion-MNIST >= 88%), plus the CPU specs with the GPU present,
#   5. bench/gpu.lua (GEMM vs cuBLAS, MLP samples/s, NCCL and copy bandwidth).
# Logs and summary.txt go to $OUT (default ./gpu-suite-out). Skips become
# failures here (DDPLUA_REQUIRE_GPU=1). Exit status: number of failed steps.
set -u
set -f # no globbing: the busted paths below contain "?"
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-suite-out}
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
export DDPLUA_REQUIRE_GPU=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
FAILED=0
T0=$(date +%s)
# the whole run stays inside this many seconds: each step's limit is cut
# to what is left (the device lease is 15 minutes including start-up)
BUDGET=${SUITE_BUDGET:-460}

note() { echo "$*" | tee -a "$SUMMARY"; }
# step NAME LIMIT_SECONDS LOG command... : runs with a time limit, records the outcome
step() {
  name=$1 limit=$2 log=$3
  shift 3
  left=$((T0 + BUDGET - $(date +%s)))
  if [ $left -lt 15 ]; then
    note "FAIL  $name (not run: the ${BUDGET}s budget is spent)"
    FAILED=$((FAILED + 1))
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  s=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$log" 2>&1
  rc=$?
  d=$(( $(date +%s) - s ))
  if [ $rc -eq 0 ]; then
    note "PASS  $name (${d}s, log $log)"
  else
    [ $rc -eq 124 ] && why="timed out after ${limit}s" || why="exit $rc"
    note "FAIL  $name ($why, ${d}s, log $log)"
    tail -n 40 "$OUT/$log" | sed 's/^/      /' >> "$SUMMARY"
    FAILED=$((FAILED + 1))
  fi
  return $rc
}

note "ddplua GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/nvidia-smi.txt" 2>&1 &&
  note "GPU: $(head -n 1 "$OUT/nvidia-smi.txt")" || note "nvidia-smi: not available"

# 1. build
if step "build (Release, CUDA on, -j$JOBS)" 240 build.log \
    sh -c "cmake -S '$ROOT' -B '$BUILD' -DCMAKE_BUILD_TYPE=Release -DDDPLUA_CUDA=ON && cmake --build '$BUILD' -j $JOBS"; then
  note "      nvcc compiled $(grep -c 'Building CUDA object' "$OUT/build.log") .cu files"
fi
if [ ! -f "$BUILD/lib/ddplua_cuda.so" ]; then
  note "FAIL  the CUDA plugin was not built: nothing else can run"
  exit $((FAILED + 1))
fi

LUA_PATHS="package.path='$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;'..package.path package.cpath='$BUILD/lib/?.so;'..package.cpath"
# 2. the plugin loads and sees the GPU
step "plugin loads and sees the GPU" 60 plugin.log lua5.4 -e "$LUA_PATHS
  local ddp = require 'ddplua'
  local ok, why = ddp.cuda_is_available()
  print('cuda_is_available', ok, why or '')
  assert(ok, why)
  print('device', ddp.device(), ddp.cuda_device_name(0))
  local t = ddp.arange(0, 10, 1, {device = 'cuda'})
  assert(t:sum():item() == 45)"

# 3. C tests on the GPU (and the CPU ones, which take a second)
step "ctest -L gpu" 90 ctest_gpu.log sh -c "cd '$BUILD' && ctest -L gpu --output-on-failure"
step "ctest -L c (the CPU C tests)" 60 ctest_c.log sh -c "cd '$BUILD' && ctest -L c --output-on-failure"

# 4. Lua specs
export DDPLUA_BIN=$BUILD/bin/ddplua
export DDPLUA_GPU_RAW=$BUILD/bin/ddplua_gpu_raw
BUSTED="busted -o plainTerminal --cpath=$BUILD/lib/?.so --lpath=$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/tests/?.lua"
if command -v busted > /dev/null; then
  step "busted --tags=gpu tests/gpu" 200 busted_gpu.log $BUSTED --tags=gpu tests/gpu
  step "busted tests/spec (CPU specs, GPU present)" 60 busted_spec.log $BUSTED tests/spec
else
  note "FAIL  busted is not installed: the Lua GPU specs did not run"
  FAILED=$((FAILED + 1))
fi

# 5. benchmarks
ELAPSED=$(( $(date +%s) - T0 ))
if [ $ELAPSED -lt $((BUDGET - 90)) ]; then
  step "bench/gpu.lua" 80 bench.log env OUT="$OUT" "$BUILD/bin/ddplua" bench/gpu.lua
else
  step "bench/gpu.lua (quick: little time left)" 40 bench.log env OUT="$OUT" "$BUILD/bin/ddplua" bench/gpu.lua quick=true
fi
[ -f "$OUT/gpu_bench.txt" ] && { note "benchmarks:"; sed 's/^/      /' "$OUT/gpu_bench.txt" >> "$SUMMARY"; }

note "done in $(( $(date +%s) - T0 ))s: $FAILED step(s) failed"
cat "$SUMMARY" > /dev/null
exit $FAILED

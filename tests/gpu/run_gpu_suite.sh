#!/bin/bash
# The GPU suite in one command, for a bare machine with an NVIDIA GPU (sized
# for the lent H200: the whole run, build included, stays within
# SUITE_BUDGET seconds, 510 by default; every step is time-boxed, and a step
# the budget cannot fit is reported as not run):
#   0. the bundle (.gpu-bundle/, tools/gpu_bundle.sh: Lua, busted, libyaml,
#      libpng, libjpeg, zlib headers, pkg-config, Fashion-MNIST) on the
#      paths, NCCL looked up in Python's nvidia-nccl wheel, the machine's
#      tools and versions recorded (environment.txt);
#   1. build, Release, CUDA on (the log must show nvcc at work);
#   2. the plugin loads through stock lua5.4 and sees the GPU;
#   3. ctest -L gpu (C tests of the plugin, its allocator and NCCL at world 1);
#   4. busted, one call per file of tests/gpu (TAP: a step cut by its
#      timeout keeps the results before the cut);
#   5. bench/gpu.lua: GEMM against cuBLAS (random operands, checked) and
#      torch.matmul, the MLP step against PyTorch on the same GPU, NCCL and
#      copy bandwidth;
#   6. compute-sanitizer --tool memcheck over each C GPU test;
#   7. the CUDA plugin built without NCCL keeps CUDA;
#   5b. examples/gpt/train.lua on the GPU, float32 and bf16 autocast
#      (GPT_STEPS steps, 300 by default): tokens/s and validation loss;
#   8. ctest -L c, then busted one call per file of tests/spec and tests/mp
#      (the CPU tests with a GPU present; SUITE_SPECS="tests/spec/x_spec.lua
#      ..." runs only those).
# --quick: 0-5 (bench quick=true) only, for a second call with little
# device time left. --no-gpu: the steps that need no GPU (0, 1, 8, the GPU
# specs loading and skipping, PyTorch's script as a CPU smoke test): how
# the bundle is proven on a machine without one (tests/gpu/masked_run.sh).
#
# Results: $OUT (default ./gpu-suite-out) gets summary.txt, logs.tar.gz
# (every step's log, rewritten after each step, so a run cut short keeps
# what finished), gpu_bench.txt and summary.txt.running (the steps started).
# Exit status: the number of failed steps.
# Usage: tests/gpu/run_gpu_suite.sh [--no-gpu] [--quick]
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
GPU=1 QUICK=0
for a in "$@"; do
  case "$a" in
  --no-gpu) GPU=0 ;;
  --quick) QUICK=1 ;;
  *) echo "usage: $0 [--no-gpu] [--quick]" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$ROOT/gpu-suite-out}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET=${SUITE_BUDGET:-510}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
LOGS=$(mktemp -d /tmp/ddplua-gpu-suite.XXXXXX)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
rm -f "$OUT/logs.tar.gz" "$OUT/gpu_bench.txt" "$SUMMARY.running"
FAILED=0
T0=$(date +%s)

note() { echo "$*" | tee -a "$SUMMARY"; }
pack() { tar czf "$OUT/logs.tar.gz.tmp" -C "$LOGS" . 2> /dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"; }
left() { echo $((T0 + BUDGET - $(date +%s))); }

# what a failed step puts in the summary: TAP failures with their
# messages, else the log's last lines
failure_detail() {
  if grep -q '^not ok ' "$1" 2> /dev/null; then
    awk '/^not ok /{n=1; c=0} n && c < 14 {print; c++} /^ok /{n=0}' "$1" | head -n 80
  else
    tail -n 30 "$1"
  fi
}

# step NAME LIMIT LOG command... : runs with a time limit (cut to what the
# budget has left, keeping 20 s to pack), records the outcome
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local l
  l=$(($(left) - 20))
  if [ "$l" -lt 10 ]; then
    note "FAIL  $name (not run: the ${BUDGET}s budget is spent)"
    FAILED=$((FAILED + 1))
    return 1
  fi
  [ "$limit" -gt "$l" ] && limit=$l
  echo "RUN   $name (limit ${limit}s)" >> "$SUMMARY.running"
  local s=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$LOGS/$log" 2>&1
  local rc=$?
  local d=$(($(date +%s) - s))
  local tap=""
  if grep -q '^1\.\.[0-9]*$\|^ok \|^not ok ' "$LOGS/$log" 2> /dev/null; then
    tap=", $(grep -c '^ok ' "$LOGS/$log") ok ($(grep -c '^ok [0-9]* - # SKIP' "$LOGS/$log") skipped), $(grep -c '^not ok ' "$LOGS/$log") not ok"
  fi
  if [ $rc -eq 0 ]; then
    note "PASS  $name (${d}s$tap)"
  else
    local why="exit $rc"
    { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && why="timed out after ${limit}s"
    note "FAIL  $name ($why, ${d}s$tap, log $log)"
    failure_detail "$LOGS/$log" | sed 's/^/      /' >> "$SUMMARY"
    FAILED=$((FAILED + 1))
  fi
  pack
  return $rc
}

# busted_files LABEL LIMIT_PER_FILE files...: one TAP busted call per file
busted_files() {
  local label=$1 limit=$2
  shift 2
  for f in "$@"; do
    step "busted $f" "$limit" "busted_$(basename "$(dirname "$f")")_$(basename "$f" .lua).tap" \
      busted -o TAP --verbose "--cpath=$BUILD/lib/?.so" "--lpath=$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/tests/?.lua" \
      "$f"
  done
}

commit=$(git rev-parse --short HEAD 2> /dev/null || echo "? (no .git; the bundle was made at $(cat "${DDPLUA_BUNDLE:-$ROOT/.gpu-bundle}/SOURCE" 2> /dev/null || echo '?'))")
note "ddplua GPU suite ($([ $GPU = 1 ] && echo "GPU" || echo "--no-gpu")), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit, budget ${BUDGET}s"

# ---- 0. environment ----
BUNDLE=${DDPLUA_BUNDLE:-$ROOT/.gpu-bundle}
if [ -f "$BUNDLE/env.sh" ]; then
  export DDPLUA_BUNDLE=$BUNDLE
  # shellcheck source=/dev/null
  . "$BUNDLE/env.sh"
  note "bundle: $BUNDLE ($(du -sm "$BUNDLE" | cut -f1) MiB, $(wc -l < "$BUNDLE/PACKAGES") packages)"
else
  note "bundle: none at $BUNDLE (tools/gpu_bundle.sh): using the machine's own packages"
  export DDPLUA_ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} DDPLUA_ORIG_PATH=$PATH
fi
# Python (PyTorch, the NCCL wheel) runs without the bundle's libraries
if [ -n "$DDPLUA_ORIG_LD_LIBRARY_PATH" ]; then
  export DDPLUA_TORCH_PYTHON="env LD_LIBRARY_PATH='$DDPLUA_ORIG_LD_LIBRARY_PATH' PATH='$DDPLUA_ORIG_PATH' python3"
else
  export DDPLUA_TORCH_PYTHON="env -u LD_LIBRARY_PATH PATH='$DDPLUA_ORIG_PATH' python3"
fi
py() { sh -c "$DDPLUA_TORCH_PYTHON \"\$@\"" py "$@"; }
# the specs and examples read Fashion-MNIST at its Debian path
FM=/usr/share/datasets/fashion-mnist
if [ ! -f "$FM/train-images-idx3-ubyte.gz" ] && [ -n "${DDPLUA_FASHION_MNIST:-}" ]; then
  mkdir -p "$FM" 2> /dev/null && for f in "$DDPLUA_FASHION_MNIST"/*.gz; do ln -sf "$f" "$FM/"; done
fi
[ -f "$FM/train-images-idx3-ubyte.gz" ] && note "Fashion-MNIST: $FM" || note "Fashion-MNIST: missing at $FM"
# and the GPT example's corpus at the fortunes package's path
FT=/usr/share/games/fortunes
if [ ! -d "$FT" ] && [ -n "${DDPLUA_FORTUNES:-}" ] && [ -d "$DDPLUA_FORTUNES" ]; then
  mkdir -p "$(dirname "$FT")" 2> /dev/null && ln -sfn "$DDPLUA_FORTUNES" "$FT"
fi
# NCCL from the wheel PyTorch uses (libnccl.so.2, maybe no header: the bundle has one)
if [ -z "${NCCL_HOME:-}" ]; then
  d=$(py -c "import nvidia.nccl as n, os; print(list(n.__path__)[0])" 2> /dev/null || true)
  [ -n "$d" ] && [ -e "$d/lib/libnccl.so.2" ] && export NCCL_HOME=$d
fi
note "NCCL_HOME: ${NCCL_HOME:-none}"
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer 2> /dev/null | head -n 1 || true)
{
  echo "== uname"; uname -a
  echo "== nvidia-smi"; nvidia-smi 2>&1 | head -n 20
  echo "== nvcc"; (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>&1; /usr/local/cuda/bin/nvcc --version 2>&1 | tail -n 2
  echo "== cmake / ninja / gcc"; cmake --version | head -n 1; ninja --version 2>&1; gcc --version | head -n 1
  echo "== lua5.4 / busted / pkg-config"; command -v lua5.4 busted pkg-config; busted --version
  echo "== python3 / torch"; py -c "import sys, torch; print(sys.executable, torch.__version__, torch.version.cuda, torch.cuda.is_available())" 2>&1 | tail -n 1
  echo "== NCCL_HOME=${NCCL_HOME:-}"; [ -n "${NCCL_HOME:-}" ] && find "$NCCL_HOME" -maxdepth 2 | head -n 20
  echo "== compute-sanitizer: ${SANITIZER:-none}"
  echo "== env"; env | grep -E '^(PATH|LD_LIBRARY_PATH|PKG_CONFIG|CPATH|CMAKE_PREFIX_PATH|LUA_|DDPLUA_|NCCL|CUDA)' | sort
} > "$LOGS/environment.txt" 2>&1
if [ $GPU = 1 ]; then
  export DDPLUA_REQUIRE_GPU=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  if gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) && [ -n "$gpus" ]; then
    note "GPU: $(echo "$gpus" | head -n 1) ($(echo "$gpus" | wc -l) visible)"
  else
    note "FAIL  no GPU visible (nvidia-smi: $(echo "$gpus" | head -n 1))"
    FAILED=$((FAILED + 1))
  fi
fi
pack

# ---- 1. build ----
GEN=()
command -v ninja > /dev/null && GEN=(-G Ninja)
if step "build (Release, CUDA on, -j$JOBS)" 300 build.log \
  sh -c "cmake -S '$ROOT' -B '$BUILD' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release -DDDPLUA_CUDA=ON && cmake --build '$BUILD' -j $JOBS"; then
  grep 'ddplua: ' "$LOGS/build.log" | sed 's/^-- /      /' >> "$SUMMARY"
  note "      nvcc compiled $(grep -c 'Building CUDA object' "$LOGS/build.log") .cu files"
fi
if [ ! -x "$BUILD/bin/ddplua" ]; then
  note "FAIL  the build produced no ddplua: nothing else can run"
  pack
  exit $((FAILED + 1))
fi
# relative to the root where the build is under it: some specs prefix it with the root
DDPLUA_BIN=$BUILD/bin/ddplua
case "$BUILD" in "$ROOT"/*) DDPLUA_BIN=./${BUILD#"$ROOT"/}/bin/ddplua ;; esac
export DDPLUA_BIN DDPLUA_GPU_RAW=$BUILD/bin/ddplua_gpu_raw
if [ ! -f "$BUILD/lib/ddplua_cuda.so" ]; then
  note "$([ $GPU = 1 ] && echo FAIL || echo NOTE)  the CUDA plugin was not built (see build.log)"
  [ $GPU = 1 ] && FAILED=$((FAILED + 1))
fi

# ---- 2-3. the plugin and the C GPU tests ----
HAVE_PLUGIN=0
[ $GPU = 1 ] && [ -f "$BUILD/lib/ddplua_cuda.so" ] && HAVE_PLUGIN=1
if [ $HAVE_PLUGIN = 1 ]; then
  step "the plugin loads through lua5.4 and sees the GPU" 60 plugin.log lua5.4 -e "
    package.path = '$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;' .. package.path
    package.cpath = '$BUILD/lib/?.so;' .. package.cpath
    local ddp = require 'ddplua'
    local ok, why = ddp.cuda_is_available()
    print('cuda_is_available', ok, why or '')
    assert(ok, why)
    print('device', ddp.device(), ddp.cuda_device_name(0))
    print('nccl_available', ddp.distributed.nccl_available())
    local t = ddp.arange(0, 10, 1, { device = 'cuda' })
    assert(t:sum():item() == 45)"
  step "ctest -L gpu" 150 ctest_gpu.log sh -c "cd '$BUILD' && ctest -L gpu --output-on-failure"
fi

# ---- 4. GPU specs (without a GPU: they load and skip) ----
busted_files "tests/gpu" 240 tests/gpu/ops_gpu_spec.lua tests/gpu/nn_gpu_spec.lua tests/gpu/dist_gpu_spec.lua

# ---- 5. benchmarks (before memcheck: a short budget keeps the figures) ----
if [ $HAVE_PLUGIN = 1 ]; then
  if [ "$(left)" -gt 180 ] && [ $QUICK = 0 ]; then
    step "bench/gpu.lua (vs cuBLAS, PyTorch, NCCL)" 170 bench.log env OUT="$OUT" "$DDPLUA_BIN" bench/gpu.lua
  else
    step "bench/gpu.lua quick=true" 100 bench.log env OUT="$OUT" "$DDPLUA_BIN" bench/gpu.lua quick=true
  fi
  if [ -f "$OUT/gpu_bench.txt" ]; then
    note "benchmarks (also in gpu_bench.txt):"
    sed 's/^/      /' "$OUT/gpu_bench.txt" >> "$SUMMARY"
  fi
elif [ $GPU = 0 ]; then
  if py -c "import torch" 2> /dev/null; then
    step "bench/gpu_torch.py smoke test on the CPU" 120 torch_smoke.log \
      sh -c "$DDPLUA_TORCH_PYTHON bench/gpu_torch.py jobs 'mlp f32 3' 'mlp f32_host 3' 'mlp bf16 3' 'gemm 64 32 16 float32 2' --device cpu"
  else
    note "SKIP  bench/gpu_torch.py smoke test: python3 here has no torch"
  fi
  step "bench/gpu.lua without a GPU (says so, exits 0)" 30 bench.log "$DDPLUA_BIN" bench/gpu.lua
fi

# ---- 5b. the GPT example on the GPU (float32 and bf16 autocast) ----
if [ $HAVE_PLUGIN = 1 ] && [ -d /usr/share/games/fortunes ]; then
  for ac in none bfloat16; do
    step "examples/gpt/train.lua on the GPU, autocast=$ac" 90 "gpt_$ac.log" "$DDPLUA_BIN" examples/gpt/train.lua \
      steps=${GPT_STEPS:-300} eval_batches=20 autocast=$ac out="/tmp/ddplua-gpt-$ac" && \
      grep '^gpt nproc' "$LOGS/gpt_$ac.log" | sed 's/^/      /' >> "$SUMMARY"
  done
fi

# ---- 6. memcheck over the C GPU tests ----
if [ $HAVE_PLUGIN = 1 ] && [ $QUICK = 0 ]; then
  if [ -n "$SANITIZER" ]; then
    for t in "$BUILD"/tests/test_gpu_*; do
      step "compute-sanitizer memcheck $(basename "$t")" 90 "memcheck_$(basename "$t").log" \
        "$SANITIZER" --tool memcheck --error-exitcode 3 --leak-check no --report-api-errors no "$t"
    done
  else
    note "FAIL  compute-sanitizer not found: memcheck did not run"
    FAILED=$((FAILED + 1))
  fi
fi

# ---- 7. the plugin built without NCCL keeps CUDA ----
if [ $HAVE_PLUGIN = 1 ] && [ $QUICK = 0 ] && [ "$(left)" -gt 150 ]; then
  step "the CUDA plugin built without NCCL (-DDDPLUA_NCCL=OFF)" 120 no_nccl.log sh -c \
    "cmake -S '$ROOT' -B '$BUILD-nonccl' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release -DDDPLUA_NCCL=OFF > /dev/null &&
     cmake --build '$BUILD-nonccl' -j $JOBS --target ddplua_cuda > /dev/null &&
     DDPLUA_CUDA_PLUGIN='$BUILD-nonccl/lib/ddplua_cuda.so' '$DDPLUA_BIN' tests/gpu/scripts/no_nccl_plugin.lua port=29558"
fi

# ---- 8. the CPU tests, with the GPU present ----
if [ $QUICK = 0 ]; then
  [ -z "${SUITE_SPECS:-}" ] && step "ctest -L c" 90 ctest_c.log sh -c "cd '$BUILD' && ctest -L c --output-on-failure"
  # SUITE_SPECS (file names) runs only those; specs whose Debian-only needs
  # the GPU machine lacks (gnuplot; /usr/bin/python3 with PyTorch) are
  # reported as not run
  specs=()
  for f in tests/spec/*_spec.lua tests/mp/*_spec.lua; do
    if [ -n "${SUITE_SPECS:-}" ] && ! echo " $SUITE_SPECS " | grep -q " $f "; then continue; fi
    case "$f" in
    */plot_spec.lua) command -v gnuplot > /dev/null || { note "SKIP  busted $f (no gnuplot on this machine)"; continue; } ;;
    */diff_suite_spec.lua)
      /usr/bin/python3 -c 'import torch' 2> /dev/null || { note "SKIP  busted $f (no /usr/bin/python3 with torch)"; continue; } ;;
    esac
    specs+=("$f")
  done
  for f in "${specs[@]}"; do busted_files "$(dirname "$f")" 150 "$f"; done
fi

rm -f "$SUMMARY.running"
note "done in $(($(date +%s) - T0))s: $FAILED step(s) failed"
pack
rm -rf "$LOGS"
exit $((FAILED > 100 ? 100 : FAILED))

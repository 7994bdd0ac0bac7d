#!/bin/bash
# Proves the GPU bundle on a machine without a GPU: runs
# `tests/gpu/run_gpu_suite.sh --no-gpu` in a mount namespace where what the
# lent GPU machine lacks is hidden, so that a file the bundle misses fails
# here and not there. Hidden (overlay whiteouts over each package's files,
# an empty tmpfs over the dataset): lua5.4 and liblua5.4, busted and every
# lua-* module, libyaml, libpng, libjpeg, the zlib headers and libz.so,
# pkg-config/pkgconf, OpenBLAS (and the libblas/liblapack it provides),
# Fashion-MNIST, the CUDA toolkit's NCCL, and /usr/bin/python3's torch
# (Debian's, which needs OpenBLAS; the GPU machine's PyTorch is another
# Python's, and its /usr/bin/python3 has none). NCCL then comes the way the
# GPU machine has it: a copy of libnccl.so.2 alone (no header, no
# libnccl.so) in a wheel-like folder named by NCCL_HOME; nccl.h comes from
# the bundle.
#
# Needs root (unshare -m, overlayfs). Usage: tests/gpu/masked_run.sh
# (OUT, default ./gpu-suite-out-masked; BUILD, default ./build-masked), or
# tests/gpu/masked_run.sh COMMAND... to run something else under the same
# masks with the bundle's environment.
set -eu -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
[ "$(id -u)" = 0 ] || { echo "masked_run: needs root (mount namespace)" >&2; exit 2; }
[ -f .gpu-bundle/env.sh ] || sh tools/gpu_bundle.sh

if [ "${DDPLUA_MASKED:-}" != 1 ]; then
  # the wheel-like NCCL, made before its source is hidden
  WHEEL=$(mktemp -d /tmp/ddplua-nccl-wheel.XXXXXX)
  src=$(ls /usr/local/cuda/lib/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 2> /dev/null | head -n 1 || true)
  if [ -n "$src" ]; then
    mkdir -p "$WHEEL/nvidia/nccl/lib"
    cp -L "$src" "$WHEEL/nvidia/nccl/lib/libnccl.so.2"
  fi
  rc=0
  DDPLUA_MASKED=1 NCCL_WHEEL="$WHEEL/nvidia/nccl" unshare -m --propagation private "$0" "$@" || rc=$?
  rm -rf "$WHEEL"
  exit $rc
fi

# ---- inside the namespace ----
WO=$NCCL_WHEEL/../../../whiteouts # removed with the wheel by the parent
mkdir -p "$WO"
mount -t tmpfs tmpfs "$WO"
pkgs="lua5.4 liblua5.4-0 liblua5.4-dev libyaml-0-2 libyaml-dev libpng16-16 libpng-dev libpng-tools libjpeg62-turbo
libjpeg62-turbo-dev libjpeg-dev zlib1g-dev pkg-config pkgconf pkgconf-bin libpkgconf3 dataset-fashion-mnist python3-torch
$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' 'lua-*' 'libopenblas*' 2> /dev/null | awk '$2 == "installed" { print $1 }')"
list=$WO/hidden.txt
for p in $pkgs; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2> /dev/null)" = installed ] || continue
  dpkg -L "$p" | while read -r f; do [ -d "$f" ] && [ ! -L "$f" ] || echo "$f"; done
done > "$list"
# what OpenBLAS provides through the alternatives, and the toolkit's NCCL
ls -d /usr/lib/x86_64-linux-gnu/libblas.so* /usr/lib/x86_64-linux-gnu/liblapack.so* /usr/local/cuda*/include/nccl*.h \
  /usr/local/cuda*/lib*/libnccl* /usr/local/cuda*/targets/*/lib/libnccl* /usr/local/cuda*/targets/*/include/nccl*.h \
  2> /dev/null >> "$list" || true
# The whiteouts: a folder whose every file is hidden goes as a whole (one
# whiteout in its parent), other files one by one; overlays then stack at
# most two deep (overlayfs allows two).
grep -v '^/usr/share/datasets/fashion-mnist' "$list" | grep -v '^/usr/share/\(doc\|man\|lintian\)/' > "$list.f"
python3 - "$list.f" > "$list.plan" <<'PY'
import os, sys
hidden = set()
for line in open(sys.argv[1]):
    f = line.rstrip("\n")
    if os.path.lexists(f):
        hidden.add(os.path.join(os.path.realpath(os.path.dirname(f)), os.path.basename(f)))
def all_hidden(d):  # byte-compiled files count as their package's
    for top, dirs, files in os.walk(d):
        for name in files + [x for x in dirs if os.path.islink(os.path.join(top, x))]:
            if os.path.join(top, name) not in hidden and os.path.basename(top) != "__pycache__":
                return False
    return True
plan = set()
for f in hidden:
    top = f
    parent = os.path.dirname(f)
    while parent not in ("/", "/usr", "/usr/share", "/usr/lib", "/usr/include", "/usr/bin", "/usr/lib/x86_64-linux-gnu",
                         "/usr/local", "/etc") and all_hidden(parent):
        top, parent = parent, os.path.dirname(parent)
    plan.add((os.path.dirname(top), os.path.basename(top)))
for d, b in sorted(plan):
    print(d + "\t" + b)
PY

# one overlay per folder, its whiteouts on top (parents before children)
n=0
for dir in $(cut -f1 "$list.plan" | sort -u | awk '{ print length, $0 }' | sort -n | cut -d' ' -f2-); do
  w="$WO/w$n"
  n=$((n + 1))
  mkdir -p "$w"
  awk -F '\t' -v d="$dir" '$1 == d { print $2 }' "$list.plan" | while read -r b; do mknod "$w/$b" c 0 0; done
  mount -t overlay overlay -o "lowerdir=$w:$dir" "$dir"
done
mount -t tmpfs tmpfs /usr/share/datasets/fashion-mnist 2> /dev/null || true
echo "masked_run: $(wc -l < "$list.f") files hidden by $(wc -l < "$list.plan") whiteouts in $n folders, Fashion-MNIST emptied"

# the masking works: none of these is left
leak=0
for f in /usr/bin/lua5.4 /usr/bin/busted /usr/bin/pkg-config /usr/include/yaml.h /usr/include/png.h /usr/include/jpeglib.h \
  /usr/include/zlib.h /usr/include/lua5.4/lua.h /usr/lib/x86_64-linux-gnu/libyaml-0.so.2 /usr/lib/x86_64-linux-gnu/libpng16.so.16 \
  /usr/lib/x86_64-linux-gnu/libjpeg.so.62 /usr/lib/x86_64-linux-gnu/liblua5.4.so.0 /usr/lib/x86_64-linux-gnu/libopenblas.so.0 \
  /usr/lib/x86_64-linux-gnu/libblas.so.3 /usr/lib/x86_64-linux-gnu/libz.so /usr/share/lua/5.4/busted/runner.lua \
  /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz /usr/local/cuda/include/nccl.h /usr/local/cuda/lib/libnccl.so.2; do
  if [ -e "$f" ]; then echo "masked_run: $f is still visible" >&2; leak=1; fi
done
for c in lua5.4 lua busted pkg-config pkgconf; do
  if command -v "$c" > /dev/null; then echo "masked_run: $c is still on the PATH ($(command -v "$c"))" >&2; leak=1; fi
done
[ $leak = 0 ] || exit 3
echo "masked_run: none of the hidden commands, headers, libraries or dataset files is visible"

[ -e "$NCCL_WHEEL/lib/libnccl.so.2" ] && export NCCL_HOME=$NCCL_WHEEL && echo "masked_run: NCCL_HOME=$NCCL_HOME (libnccl.so.2 only)"
if [ $# -gt 0 ]; then # another command under the same masks, with the bundle's environment
  export DDPLUA_BUNDLE=$ROOT/.gpu-bundle
  . "$DDPLUA_BUNDLE/env.sh"
  exec "$@"
fi
export OUT=${OUT:-$ROOT/gpu-suite-out-masked} BUILD=${BUILD:-$ROOT/build-masked}
rm -rf "$BUILD" # built from nothing, as on the GPU machine
exec tests/gpu/run_gpu_suite.sh --no-gpu

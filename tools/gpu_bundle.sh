#!/bin/sh
# Prepares .gpu-bundle/ (ignored by git): everything the lent GPU machine
# lacks to build and test ddplua, to travel with the working tree (the
# device `run` tool's carry list: ".gpu-bundle"), under 64 MiB with the tree.
#
# The GPU machine has cmake, ninja, gcc, nvcc 13, compute-sanitizer, Python
# 3.12 with PyTorch and NCCL as the nvidia-nccl-cu13 wheel, but none of
# Debian's packages. The build runs there (its nvcc, its CUDA, its NCCL),
# so the bundle carries the Debian packages' files, unpacked, rather than a
# prebuilt tree:
#   - lua5.4 (interpreter, library, headers), busted and its Lua modules
#     (apt-cache depends lua-busted: cliargs, dkjson, filesystem, luassert,
#     mediator, penlight, say, system, term), libyaml, libpng, libjpeg, the
#     zlib headers, pkgconf (cmake's pkg_check_modules needs it), with the
#     pkg-config files rewritten to find themselves (${pcfiledir});
#   - the runtime libraries such a machine usually has (zlib, readline,
#     tinfo) in fallback/, used only where the machine lacks them;
#   - no OpenBLAS (30+ MB): without it the CPU GEMM runs a plain loop
#     (src/backends/cpu/cpu_blas.c), which float64 references need only;
#   - the Fashion-MNIST files (dataset-fashion-mnist) and the text of the
#     fortunes package (the GPT example's corpus);
#   - nccl.h from this machine's CUDA toolkit, for a wheel that ships
#     libnccl.so.2 without its header (cmake/cuda.cmake: DDPLUA_NCCL_INCLUDE);
#   - env.sh, which sets PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH/LIBDIR,
#     CPATH, CMAKE_PREFIX_PATH, LUA_PATH/LUA_CPATH and DDPLUA_NCCL_INCLUDE:
#     DDPLUA_BUNDLE=<dir> . <dir>/env.sh
# The packages are the versions installed here, taken from apt's cache or
# fetched with `apt-get download` and unpacked with `dpkg -x` (a version the
# mirrors dropped is copied from the installed files); PACKAGES lists them.
#
# Usage: sh tools/gpu_bundle.sh [DIR]      (default: .gpu-bundle)
# Prints the bundle's size; fails if it is over 56 MiB (the tree travels too).
set -eu
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-$ROOT/.gpu-bundle}
ARCH=$(dpkg --print-architecture)
MULTI=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

PKGS="lua5.4 liblua5.4-0 liblua5.4-dev
lua-busted lua-cliargs lua-dkjson lua-filesystem lua-luassert lua-mediator lua-penlight lua-say lua-system lua-term
libyaml-0-2 libyaml-dev libpng16-16 libpng-dev libjpeg62-turbo libjpeg62-turbo-dev zlib1g-dev
pkgconf-bin libpkgconf3"
FALLBACK_PKGS="zlib1g libreadline8 libtinfo6"

for p in $(apt-cache depends lua-busted 2>/dev/null | sed -n 's/^ *Depends: \(lua-[a-z0-9-]*\)$/\1/p'); do
  case " $(echo $PKGS) " in *" $p "*) ;; *) echo "gpu_bundle: lua-busted now depends on $p, which the bundle lacks" >&2; exit 1 ;; esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs"
chmod 755 "$work"
chmod 777 "$work/debs" # apt-get download writes as the _apt user

# Unpacks an installed package into $2: its .deb from apt's cache, else
# fetched with `apt-get download` (the installed version), else (a version
# the mirrors no longer carry) the files dpkg installed, copied as they are.
unpack() {
  pkg=$1 dest=$2
  ver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) || { echo "gpu_bundle: $pkg is not installed here" >&2; exit 1; }
  a=$(dpkg-query -W -f='${Architecture}' "$pkg")
  file=$(printf '%s_%s_%s.deb' "$pkg" "$(echo "$ver" | sed 's/:/%3a/')" "$a")
  how=deb
  if [ -f "/var/cache/apt/archives/$file" ]; then
    cp "/var/cache/apt/archives/$file" "$work/debs/"
  elif ! (cd "$work/debs" && apt-get download -q "$pkg=$ver" > /dev/null 2>&1); then
    how=installed
  fi
  mkdir -p "$dest"
  if [ "$how" = deb ]; then
    dpkg -x "$work/debs/$file" "$dest"
  else
    dpkg -L "$pkg" | grep -v '^/usr/share/\(doc\|man\|lintian\)/' | while read -r f; do
      if [ -f "$f" ] || [ -L "$f" ]; then mkdir -p "$dest$(dirname "$f")" && cp -a "$f" "$dest$f"; fi
    done
  fi
  echo "$pkg $ver ($how)" >> "$work/versions"
}

rm -rf "$OUT"
mkdir -p "$OUT/root" "$OUT/bin" "$OUT/fallback" "$OUT/nccl/include" "$OUT/fashion-mnist"
for p in $PKGS; do unpack "$p" "$OUT/root"; done
for p in $FALLBACK_PKGS; do
  unpack "$p" "$work/fb/$p"
  # one folder per soname: env.sh adds it only where the machine lacks that library
  for lib in $(find "$work/fb/$p" -name '*.so.*' \( -type f -o -type l \)); do
    base=$(basename "$lib")
    case "$base" in *.so.[0-9] | *.so.[0-9][0-9]) ;; *) continue ;; esac
    mkdir -p "$OUT/fallback/$base"
    cp -L "$lib" "$OUT/fallback/$base/$base"
  done
done

# what neither the build nor the tests read
rm -rf "$OUT/root/usr/share/doc" "$OUT/root/usr/share/man" "$OUT/root/usr/share/lintian" "$OUT/root/usr/share/aclocal"
find "$OUT/root" -name '*.a' -delete

# absolute symlinks would leave the bundle (Debian's libz.so points at
# /lib/.../libz.so.1.2.13): point them at the bundle's own copy
for l in $(find "$OUT/root" -type l -lname '/*'); do
  t=$(readlink "$l")
  so=$(basename "$t" | sed 's/\(\.so\.[0-9]*\).*/\1/')
  if [ -e "$OUT/root$t" ]; then
    ln -sf "$(realpath --relative-to="$(dirname "$l")" "$OUT/root$t")" "$l"
  elif [ -e "$OUT/fallback/$so/$so" ]; then
    ln -sf "$(realpath --relative-to="$(dirname "$l")" "$OUT/fallback/$so/$so")" "$l"
  else
    echo "gpu_bundle: $l points at $t, which the bundle lacks" >&2
    exit 1
  fi
done
find "$OUT/root" -name 'liblua5.[123]-*' -delete # busted runs on lua5.4
rm -rf "$OUT/root/usr/lib/$MULTI/lua/5.1" "$OUT/root/usr/lib/$MULTI/lua/5.2" "$OUT/root/usr/lib/$MULTI/lua/5.3"

# pkg-config files: prefix relative to the file itself
for pc in $(find "$OUT/root" -name '*.pc' -type f); do
  case "$pc" in
  */lib/$MULTI/pkgconfig/*) up='${pcfiledir}/../../..' ;;
  */share/pkgconfig/* | */lib/pkgconfig/*) up='${pcfiledir}/../..' ;;
  *) echo "gpu_bundle: unexpected pkg-config file $pc" >&2; exit 1 ;;
  esac
  sed -i -e "s#^prefix=/usr\$#prefix=$up#" -e 's#^exec_prefix=/usr$#exec_prefix=${prefix}#' \
    -e 's#=/usr/#=${prefix}/#' "$pc"
  if grep -v '^#' "$pc" | grep -q '=/usr'; then echo "gpu_bundle: $pc still names /usr" >&2; exit 1; fi
done

# commands: lua5.4 (and lua), busted, pkg-config (pkgconf)
ln -s ../root/usr/bin/lua5.4 "$OUT/bin/lua5.4"
ln -s lua5.4 "$OUT/bin/lua"
cat > "$OUT/bin/busted" <<'EOF'
#!/bin/sh
# busted from the bundle, run by the bundle's lua5.4 (its script says `env lua`)
exec "$(dirname "$0")/lua5.4" "$(dirname "$0")/../root/usr/bin/busted" "$@"
EOF
cat > "$OUT/bin/pkg-config" <<'EOF'
#!/bin/sh
exec "$(dirname "$0")/../root/usr/bin/pkgconf" "$@"
EOF
chmod +x "$OUT/bin/busted" "$OUT/bin/pkg-config"

# the dataset
fm=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 'idx[13]-ubyte.gz$' | head -n 1 | xargs -r dirname)
[ -n "$fm" ] && [ -d "$fm" ] || fm=/usr/share/datasets/fashion-mnist
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$fm/$f" ] || { echo "gpu_bundle: $fm/$f is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
  cp "$fm/$f" "$OUT/fashion-mnist/"
done

# nccl.h for a wheel without it
for h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h; do
  if [ -f "$h" ]; then
    cp "$h" "$OUT/nccl/include/"
    break
  fi
done

# the GPT example's corpus: the fortunes package's text files (no .dat, no .u8)
if [ -d /usr/share/games/fortunes ]; then
  mkdir -p "$OUT/fortunes"
  find /usr/share/games/fortunes -maxdepth 1 \( -type f -o -type l \) ! -name '*.dat' ! -name '*.u8' -exec cp -L {} "$OUT/fortunes/" \;
fi

cat > "$OUT/env.sh" <<EOF
# Sourced with DDPLUA_BUNDLE set to this folder: DDPLUA_BUNDLE=<dir> . <dir>/env.sh
# (written by tools/gpu_bundle.sh). The variables it had before are kept in
# DDPLUA_ORIG_* for programs that must not see the bundle's libraries
# (PyTorch's Python).
: "\${DDPLUA_BUNDLE:?set DDPLUA_BUNDLE to the bundle folder before sourcing env.sh}"
export DDPLUA_ORIG_LD_LIBRARY_PATH="\${LD_LIBRARY_PATH:-}"
export DDPLUA_ORIG_PATH="\$PATH"
_r="\$DDPLUA_BUNDLE/root"
_ld="\$_r/usr/lib/$MULTI:\$_r/lib/$MULTI"
# fallback libraries, each only where the machine has none of that name
for _d in "\$DDPLUA_BUNDLE"/fallback/*; do
  [ -d "\$_d" ] || continue
  _so=\$(basename "\$_d")
  if ! { ldconfig -p 2>/dev/null | grep -q "/\$_so\\\$"; } && [ ! -e "/usr/lib/$MULTI/\$_so" ] && [ ! -e "/lib/$MULTI/\$_so" ]; then
    _ld="\$_ld:\$_d"
  fi
done
export PATH="\$DDPLUA_BUNDLE/bin:\$PATH"
export LD_LIBRARY_PATH="\$_ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="\$_r/usr/lib/$MULTI/pkgconfig:\$_r/usr/share/pkgconfig"
export PKG_CONFIG_PATH="\$PKG_CONFIG_LIBDIR"
export CPATH="\$_r/usr/include/$MULTI:\$_r/usr/include\${CPATH:+:\$CPATH}"
export CMAKE_PREFIX_PATH="\$_r/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export LUA_PATH="\$_r/usr/share/lua/5.4/?.lua;\$_r/usr/share/lua/5.4/?/init.lua;;"
export LUA_CPATH="\$_r/usr/lib/$MULTI/lua/5.4/?.so;;"
export DDPLUA_NCCL_INCLUDE="\$DDPLUA_BUNDLE/nccl/include"
export DDPLUA_FASHION_MNIST="\$DDPLUA_BUNDLE/fashion-mnist"
export DDPLUA_FORTUNES="\$DDPLUA_BUNDLE/fortunes"
unset _r _ld _d _so
EOF

sort "$work/versions" > "$OUT/PACKAGES"
# the tree it was made beside (the GPU machine gets no .git)
echo "$(git rev-parse --short HEAD 2> /dev/null || echo '?')$(git status --porcelain 2> /dev/null | grep -q . && echo ' (with uncommitted changes)')" > "$OUT/SOURCE"
dangling=$(find "$OUT" -xtype l)
if [ -n "$dangling" ]; then
  echo "gpu_bundle: links that lead nowhere: $dangling" >&2
  exit 1
fi
bytes=$(du -sb "$OUT" | cut -f1)
echo "gpu_bundle: $OUT: $((bytes / 1024 / 1024)) MiB ($bytes bytes), $(wc -l < "$OUT/PACKAGES") packages"
if [ "$bytes" -gt $((56 * 1024 * 1024)) ]; then
  echo "gpu_bundle: over 56 MiB: with the working tree it would not fit the 64 MiB a run carries" >&2
  exit 1
fi

#!/bin/sh
# Installs the Debian packages ddplua needs, when they are missing.
# usage: tools/deps.sh [run|test|bench]   (test and bench add PyTorch, the peer, and clang-format)
set -e
want="gcc make cmake pkg-config lua5.4 liblua5.4-dev libyaml-dev libopenblas-dev zlib1g-dev
      libpng-dev libjpeg-dev lua-busted dataset-fashion-mnist gnuplot-nox iproute2 procps libdnnl-dev"
case "${1:-run}" in
  test|bench) want="$want python3 python3-torch python3-torchvision python3-numpy clang-format fortunes" ;;
esac
missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "ddplua: missing Debian packages:$missing" >&2
  echo "ddplua: run as root (or: sudo apt-get install -y$missing)" >&2
  exit 1
fi
echo "ddplua: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null

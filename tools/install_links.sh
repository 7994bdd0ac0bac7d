#!/bin/sh
# Links the built module, the Lua library and the host into /usr/local so
# stock lua5.4, busted and a shell find them without setting paths.
build="${1:-build}"
top="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$(id -u)" != 0 ]; then
  echo "ddplua: not root; skipping links into /usr/local (use $top/$build/bin/ddplua)"
  exit 0
fi
mkdir -p /usr/local/share/lua/5.4 /usr/local/lib/lua/5.4/ddplua /usr/local/bin
ln -sfn "$top/lua/ddplua" /usr/local/share/lua/5.4/ddplua
ln -sf "$top/$build/lib/ddplua/core.so" /usr/local/lib/lua/5.4/ddplua/core.so
ln -sf "$top/$build/bin/ddplua" /usr/local/bin/ddplua

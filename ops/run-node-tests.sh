#!/usr/bin/env bash
# The VS Code extension's unit tests (debounce, hint lifecycle, SSE parsing...): Node's own
# test runner on the esbuild-bundled tests. Its build tools come from ops/ensure-vscode-tools.sh.
set -u
cd "$(dirname "$0")/../ops/editors/vscode"
[ -d ../../../.cache/vscode/node/node_modules/node/bin ] && PATH="$(cd ../../../.cache/vscode/node/node_modules/node/bin && pwd):$PATH"
if [ ! -x node_modules/.bin/esbuild ]; then
  echo "note: the VS Code extension's build tools are not installed (npm not found?): its unit tests are skipped." >&2
  exit 0
fi
npm test --silent

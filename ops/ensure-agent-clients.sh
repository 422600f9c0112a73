#!/usr/bin/env bash
# Test set-up: the agents' own clients from the npm registry, pinned, for tests/e2e/test_agents.py:
# OpenAI's Codex CLI (its package ships the binary) and Anthropic's Node SDK (its tool runner).
# Installed once into .cache/agent-clients; without npm those tests skip and say why.
set -u
cd "$(dirname "$0")/.."
folder=.cache/agent-clients
wanted="@openai/codex@0.171.0 @anthropic-ai/sdk@1.16.0"
stamp="$folder/.installed-$(echo "$wanted" | tr ' /@' '__-')"
[ -f "$stamp" ] && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "note: npm not found; the Codex CLI and Anthropic Node SDK tests will be skipped." >&2
  exit 0
fi
mkdir -p "$folder"
[ -f "$folder/package.json" ] || echo '{"name": "agent-clients", "private": true}' > "$folder/package.json"
echo "Installing $wanted (npm) for the agent tests..."
# shellcheck disable=SC2086
if npm install --prefix "$folder" --no-audit --no-fund --silent $wanted; then
  touch "$stamp"
else
  echo "warning: npm could not install $wanted; those tests will be skipped." >&2
fi
exit 0

#!/usr/bin/env bash
# Test set-up: Debian's prometheus (the real-scrape test), chromium and chromium-driver (the
# playground's browser test) and neovim (the editor plug-in's test), where apt is available
# and we are root; elsewhere those tests skip and say why (the README says how to install them).
set -u
missing=""
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v chromedriver >/dev/null 2>&1 || missing="$missing chromium-driver"
command -v nvim >/dev/null 2>&1 || missing="$missing neovim"
[ -z "$missing" ] && exit 0
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "Installing$missing (Debian packages) for the scrape and browser tests..."
  # shellcheck disable=SC2086
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1 || \
     { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1; }; then
    exit 0
  fi
  echo "warning: apt-get could not install$missing; those tests will be skipped." >&2
  exit 0
fi
echo "note:$missing not found; those tests will be skipped (apt-get install$missing)." >&2
exit 0

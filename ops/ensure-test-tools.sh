#!/usr/bin/env bash
# Test set-up: Debian's prometheus (for the real-scrape test) where apt is available and we
# are root; elsewhere those tests skip and say why (the README says how to install it).
set -u
command -v prometheus >/dev/null 2>&1 && exit 0
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "Installing prometheus (Debian package) for the scrape test..."
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1 || \
     { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1; }; then
    exit 0
  fi
  echo "warning: apt-get could not install prometheus; the scrape test will be skipped." >&2
  exit 0
fi
echo "note: prometheus not found; the scrape test will be skipped (apt-get install prometheus)." >&2
exit 0

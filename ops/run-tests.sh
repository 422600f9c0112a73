#!/usr/bin/env bash
# Run the whole suite; pytest's "no tests collected" (exit 5) is a failure here, not a pass.
set -u
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -p no:cacheprovider "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "no tests were collected: failing" >&2
  exit 1
fi
exit "$status"

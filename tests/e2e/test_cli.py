"""The ``gateway`` command's model management, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_models_list_shows_the_embedded_default() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "models", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "smollm2-135m-instruct" in result.stdout
    assert "imported" in result.stdout


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

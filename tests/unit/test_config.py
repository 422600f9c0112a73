from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings


def test_defaults_bind_loopback_8000() -> None:
    settings = load_settings(environ={})
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text('port = 9001\n[aliases]\n"gpt-4o-mini" = "smollm2-135m-instruct"\n')
    settings = load_settings(config, environ={"GATEWAY_PORT": "9002"})
    assert settings.port == 9002
    assert settings.aliases == {"gpt-4o-mini": "smollm2-135m-instruct"}
    assert load_settings(config, {"port": 9003}, environ={"GATEWAY_PORT": "9002"}).port == 9003
    assert load_settings(environ={"GATEWAY_CONFIG": str(config)}).port == 9001


def test_lan_binding_requires_a_secret() -> None:
    with pytest.raises(ConfigError, match="api_key"):
        load_settings(overrides={"host": "0.0.0.0"}, environ={})
    assert load_settings(overrides={"host": "0.0.0.0", "api_key": "s3cret"}, environ={}).exposed


def test_bad_values_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_settings(overrides={"port": 70000}, environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("port = = 1")
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(broken, environ={})
    with pytest.raises(ConfigError, match="alias"):
        load_settings(overrides={"aliases": {"x": "missing-model"}}, environ={})


def test_importing_the_app_does_not_import_mlx() -> None:
    # OpenBLAS only takes effect if loaded before mlx.core is first imported.
    import subprocess
    import sys

    code = "import sys, gateway.app, gateway.cli; print('mlx.core' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"

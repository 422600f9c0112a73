"""``gateway models ...`` as a user runs it: a subprocess with the environment pointing at
hand-made stores (nothing here touches the network or the real home folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.modelstore.layouts import (
    place_in_hf_cache,
    write_gguf_stub,
    write_mlx_folder,
    write_ollama_model,
)

# Runs the CLI, then says whether it imported MLX (``models list`` must not).
RUN = (
    "import sys; from gateway.cli import main; code = main(sys.argv[1:]); "
    "print('MLX' if 'mlx.core' in sys.modules else 'no MLX', file=sys.stderr); sys.exit(code)"
)


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """A home with an HF cache, an Ollama store and LM Studio models; the gateway's cache."""
    home = tmp_path / "home"
    place_in_hf_cache(write_mlx_folder(tmp_path / "src", bits=4), home / "hub", "org/mine-4bit")
    write_ollama_model(
        home / "ollama",
        "tiny",
        "latest",
        write_gguf_stub(tmp_path / "t.gguf").read_bytes(),
        params={"stop": ["<|end|>"], "temperature": 0.2},
    )
    write_mlx_folder(home / ".lmstudio/models/pub/studio-mlx")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "HF_"))}
    env.update(
        HOME=str(home),
        HF_HUB_CACHE=str(home / "hub"),
        OLLAMA_MODELS=str(home / "ollama"),
        GATEWAY_CACHE_DIR=str(tmp_path / "gateway-cache"),
    )
    return env


def gateway(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_list_json(machine: dict[str, str]) -> None:
    started = time.perf_counter()
    result = gateway(machine, "models", "list", "--json")
    print(f"\ngateway models list --json: {time.perf_counter() - started:.2f} s (process)")
    assert result.returncode == 0, result.stderr
    assert "no MLX" in result.stderr
    entries = {e["id"]: e for e in json.loads(result.stdout)}
    assert {"hf:org/mine-4bit", "ollama:tiny:latest", "lmstudio:pub/studio-mlx"} <= set(entries)
    assert entries["hf:org/mine-4bit"]["quantization"] == "4-bit (group 64)"
    assert entries["ollama:tiny:latest"]["format"] == "gguf"
    table = gateway(machine, "models", "list")
    assert "hf:org/mine-4bit" in table.stdout and "models in" in table.stdout


def test_show(machine: dict[str, str]) -> None:
    result = gateway(machine, "models", "show", "ollama:tiny", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["default_stop"] == ["<|end|>"]
    assert shown["params"] == {"temperature": 0.2}
    assert shown["chat_template"] is True
    folder = json.loads(gateway(machine, "models", "show", "hf:org/mine-4bit", "--json").stdout)
    assert folder["thinking_markers"] == ["<think>"] and folder["tool_markers"] == ["<tool_call>"]
    missing = gateway(machine, "models", "show", "hf:org/absent")
    assert missing.returncode == 2
    assert "gateway models pull hf:org/absent" in missing.stderr


def test_rm_never_touches_a_users_files(machine: dict[str, str]) -> None:
    result = gateway(machine, "models", "rm", "hf:org/mine-4bit")
    assert result.returncode == 1
    assert "never deletes a user's files" in result.stderr
    imports = Path(machine["GATEWAY_CACHE_DIR"]) / "models"
    (imports / "ollama--tiny--latest").mkdir(parents=True)
    (imports / "ollama--tiny--latest/gateway-import.json").write_text("{}")
    removed = gateway(machine, "models", "rm", "ollama:tiny")
    assert removed.returncode == 0, removed.stderr
    assert not (imports / "ollama--tiny--latest").exists()
    assert Path(machine["OLLAMA_MODELS"], "blobs").is_dir()


def test_pull_only_hf(machine: dict[str, str]) -> None:
    result = gateway(machine, "models", "pull", "ollama:tiny")
    assert result.returncode == 2 and "only hf:" in result.stderr


def test_serve_fails_at_once_on_an_uncached_hf_model(
    machine: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "g.toml"
    config.write_text('[tiers.big]\nmodel = "hf:mlx-community/Qwen3-8B-4bit"\n')
    started = time.perf_counter()
    result = gateway({**machine, "HF_HUB_OFFLINE": "1"}, "serve", "--config", str(config))
    elapsed = time.perf_counter() - started
    assert result.returncode == 2
    assert "gateway models pull hf:mlx-community/Qwen3-8B-4bit" in result.stderr
    assert "tier 'big'" in result.stderr
    assert elapsed < 10


def test_pull_downloads_then_names_the_tier_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import huggingface_hub

    from gateway.cli import main

    hub = tmp_path / "hub"
    src = write_mlx_folder(tmp_path / "src")
    asked: list[dict[str, object]] = []

    def fake_download(repo_id: str, **kwargs: object) -> str:
        """Stands in for the Hub: lays the files out as a download would."""
        asked.append({"repo_id": repo_id, **kwargs})
        return str(place_in_hf_cache(src, Path(str(kwargs["cache_dir"])), repo_id))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("GATEWAY_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["models", "pull", "hf:org/fresh"]) == 0
    assert asked[0]["repo_id"] == "org/fresh" and asked[0]["cache_dir"] == str(hub)
    assert 'model = "hf:org/fresh"' in capsys.readouterr().out
    # A GGUF repo pulled without naming a file: the answer says how to name one.
    src = tmp_path / "empty"
    src.mkdir()
    (src / "README.md").write_text("GGUF files")
    assert main(["models", "pull", "hf:org/some-GGUF"]) == 1
    assert "hf:org/some-GGUF:Q4_K_M" in capsys.readouterr().err


def test_a_damaged_model_folder_stops_the_start_with_its_reason(tmp_path: Path) -> None:
    import pytest

    from gateway.cli_models import check_model_sources
    from gateway.config import load_settings
    from gateway.errors import ModelImportError

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"xx")
    settings = load_settings(
        overrides={"cache_dir": str(tmp_path / "cache"), "default_model": str(folder)},
        environ={},
    )
    with pytest.raises(ModelImportError, match="too short for a safetensors file"):
        check_model_sources(settings)


def test_a_known_model_whose_package_is_missing_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is installed at serve time: the start names `gateway models import`."""

    from gateway.cli_models import check_model_sources
    from gateway.config import load_settings
    from gateway.errors import ModelNotFoundError
    from gateway.modelstore import store

    monkeypatch.setattr(store, "is_installed", lambda _name: False)
    settings = load_settings(
        overrides={"cache_dir": str(tmp_path / "cache"), "default_model": "gemma-3-270m"},
        environ={},
    )
    with pytest.raises(ModelNotFoundError, match="gateway models import gemma-3-270m"):
        check_model_sources(settings)


def test_list_keeps_its_columns_in_line_with_long_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31: an id longer than the ID column pushed the rest of its row out of line.
    Every column starts (or, for numbers, ends) where its heading does, and an error row's
    id and source stay in their columns too."""
    from gateway.cli import main

    deep = tmp_path / ("a-folder-name-long-enough-to-overflow-any-fixed-column" + "/x" * 8)
    configured = {
        "long": write_gguf_stub(deep / "model-with-a-long-name-Q4_K_M.gguf", file_type=15),
        "short": write_gguf_stub(tmp_path / "s.gguf"),
    }
    config = tmp_path / "g.toml"
    config.write_text(
        "".join(f'[tiers.{n}]\nmodel = "{p}"\n' for n, p in configured.items())
        + '[tiers.gone]\nmodel = "hf:org/absent"\n'
    )
    for name in ("GATEWAY_CONFIG", "GATEWAY_DEFAULT_MODEL", "OLLAMA_MODELS", "LMSTUDIO_MODELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("GATEWAY_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["models", "list", "--config", str(config)]) == 0
    heading, *rows = capsys.readouterr().out.splitlines()[:-1]
    by_id = {row.split()[0]: row for row in rows}
    for path, quant in ((configured["long"], "Q4_K_M"), (configured["short"], "Q8_0")):
        row = by_id[str(path)]
        assert row.index(" gguf ") + 1 == heading.index("SOURCE")
        assert row.index(f" {quant} ") + 1 == heading.index("QUANT")
        assert row.index(" llama ") + 1 == heading.index("ARCH")
        assert row.index(" 2048 ") + 5 == heading.index("CTX") + 3  # numbers end in line
    gone = by_id["hf:org/absent"]
    assert gone.index(" ? ") + 1 == heading.index("SOURCE")  # its source is unknown

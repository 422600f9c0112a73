"""The model store imports the embedded model atomically and verifies it (real GGUF, real MLX)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.modelstore import store as store_module
from gateway.modelstore.store import DEFAULT_MODEL_ID, MANIFEST, ModelStore


def test_import_is_atomic_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ModelStore(tmp_path)
    assert not store.is_imported(DEFAULT_MODEL_ID)

    def fail_verification(folder: Path) -> None:
        raise RuntimeError("interrupted")

    monkeypatch.setattr(store_module, "_verify", fail_verification)
    with pytest.raises(RuntimeError):
        store.import_model(DEFAULT_MODEL_ID)
    assert not store.path_for(DEFAULT_MODEL_ID).exists()
    assert list(store.root.iterdir()) == []  # no half-written staging folder left behind

    monkeypatch.undo()
    messages: list[str] = []
    folder = store.import_model(DEFAULT_MODEL_ID, messages.append)
    assert store.is_imported(DEFAULT_MODEL_ID)
    assert any("verifying" in m for m in messages)
    config = json.loads((folder / "config.json").read_text())
    assert config["rope_traditional"] is True
    # A damaged import is detected and not trusted.
    (folder / "model.safetensors").write_bytes(b"truncated")
    assert not store.is_imported(DEFAULT_MODEL_ID)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["model"] == DEFAULT_MODEL_ID

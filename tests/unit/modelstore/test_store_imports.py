"""A user's GGUF is imported once, again when the file changes; only imports are removed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.modelstore import gguf as gguf_package
from gateway.modelstore import store as store_module
from gateway.modelstore.store import MANIFEST, ModelStore


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A fake converter (writes one file) and no MLX verification: the store's own logic."""
    done: list[Path] = []

    def convert(gguf: Path, out: Path, progress: Any) -> dict[str, Any]:
        done.append(gguf)
        (out / "config.json").write_text("{}")
        return {"architecture": "llama", "quant_types": ["Q8_0"]}

    monkeypatch.setattr(gguf_package, "convert_gguf", convert, raising=False)
    monkeypatch.setattr(store_module, "_verify", lambda folder: None)
    return done


def test_import_once_again_when_changed(tmp_path: Path, conversions: list[Path]) -> None:
    store = ModelStore(tmp_path / "cache")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF-one")
    folder = store.ensure_gguf("gguf--m", gguf, str(gguf))
    assert store.ensure_gguf("gguf--m", gguf, str(gguf)) == folder
    assert conversions == [gguf]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"] == str(gguf) and manifest["source_bytes"] == 8
    assert manifest["reference"] == str(gguf)
    assert manifest["import"] == {"architecture": "llama", "quant_types": ["Q8_0"]}
    stat = gguf.stat()
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert not store.is_current("gguf--m", gguf)
    store.ensure_gguf("gguf--m", gguf, str(gguf))
    assert len(conversions) == 2
    assert list(store.imports()) == ["gguf--m"]
    assert [p.name for p in store.root.iterdir()] == ["gguf--m"]  # no staging left


def test_remove_only_imports(tmp_path: Path, conversions: list[Path]) -> None:
    store = ModelStore(tmp_path / "cache")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    folder = store.ensure_gguf("gguf--m", gguf, str(gguf))
    (store.root / "not-ours").mkdir()
    assert not store.remove("not-ours")
    assert not store.remove("../m.gguf")
    assert store.remove("gguf--m") and not folder.exists()
    assert gguf.exists()


def test_resolve_imports_an_ollama_model_with_its_stop_strings(
    tmp_path: Path, conversions: list[Path]
) -> None:
    from gateway.modelstore.sources import parse_model_ref, resolve
    from tests.unit.modelstore.layouts import write_mlx_folder, write_ollama_model

    store = ModelStore(tmp_path / "cache")
    env = {"OLLAMA_MODELS": str(tmp_path / "ollama")}
    blob = write_ollama_model(tmp_path / "ollama", "m", "latest", b"GGUF", params={"stop": ["<e>"]})
    resolved = resolve(parse_model_ref("ollama:m"), store, env)
    assert resolved.folder == store.path_for("ollama--m--latest")
    assert (resolved.default_stop, resolved.user_files, resolved.model_id) == (
        ("<e>",),
        False,  # the folder loaded is the store's import, not the user's blob
        "ollama:m",
    )
    assert conversions == [blob]
    # An MLX folder is handed over as it is: nothing imported, nothing copied.
    folder = write_mlx_folder(tmp_path / "mine")
    in_place = resolve(parse_model_ref(str(folder)), store, env)
    assert (in_place.folder, in_place.user_files) == (folder, True)
    assert conversions == [blob]


def test_an_import_recorded_under_another_spelling_is_found(
    tmp_path: Path, conversions: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: a store made before paths were normalized keyed (and recorded) the path as
    written; the same file under another spelling is that import, not a second one, and
    ``models list`` shows it once."""
    from gateway.engines.device import ComputePath
    from gateway.modelstore.catalog import CatalogContext, build_catalog
    from gateway.modelstore.sources import LocatedModel, ModelRef, parse_model_ref, resolve
    from tests.unit.modelstore.layouts import write_gguf_stub, write_mlx_folder

    def convert(gguf: Path, out: Path, progress: Any) -> dict[str, Any]:
        conversions.append(gguf)
        write_mlx_folder(out)  # describable, as a real import is
        return {}

    monkeypatch.setattr(gguf_package, "convert_gguf", convert, raising=False)
    store = ModelStore(tmp_path / "cache")
    gguf = write_gguf_stub(tmp_path / "models" / "m.gguf")
    written = f"{tmp_path}/models/../models/m.gguf"
    old = Path(written)  # the old store's key: the path as written, unnormalized
    old_slug = LocatedModel(ModelRef("gguf", written, path=old), None, old).slug
    store.ensure_gguf(old_slug, old, written)
    assert json.loads((store.path_for(old_slug) / MANIFEST).read_text())["source"] == written

    resolved = resolve(parse_model_ref(str(gguf)), store)
    assert resolved.folder == store.path_for(old_slug)
    assert len(conversions) == 1  # not imported again
    cpu = CatalogContext(ComputePath("cpu", "openblas:test", "float32", "test"), 10**9)
    entries = build_catalog(store, cpu, {"t": str(gguf)}, {"HOME": str(tmp_path)})
    rows = [e for e in entries if e.source in ("gguf", "import")]
    assert [(e.id, e.imported, e.import_folder) for e in rows] == [
        (str(gguf), True, str(store.path_for(old_slug)))
    ]

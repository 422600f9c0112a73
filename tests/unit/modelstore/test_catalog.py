"""The catalog: every model found, described from headers only, 50 of them in under a second."""

from __future__ import annotations

import time
from pathlib import Path

from gateway.engines.device import ComputePath
from gateway.modelstore.catalog import CatalogContext, build_catalog
from gateway.modelstore.store import ModelStore
from tests.unit.modelstore.layouts import (
    place_in_hf_cache,
    write_gguf_stub,
    write_mlx_folder,
    write_ollama_model,
)

CPU = ComputePath("cpu", "openblas:test", "float32", "test")
BUDGET = 10**9


def build_fifty(tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """50 models over every source: 12 HF cache (10 MLX, 2 GGUF), 10 Ollama, 10 LM Studio
    (5 MLX, 5 GGUF), 8 configured folders, 8 configured .gguf paths, the 2 known ids.
    Returns (environment, configured tiers)."""
    hub, home = tmp_path / "hub", tmp_path / "home"
    src = write_mlx_folder(tmp_path / "src-4bit", bits=4, hidden=128)
    for i in range(10):
        place_in_hf_cache(src, hub, f"mlx-community/model-{i}-4bit", f"{i:040x}")
    for i in range(2):
        gguf_src = tmp_path / f"gguf-src-{i}"
        write_gguf_stub(gguf_src / f"m{i}-Q8_0.gguf")
        place_in_hf_cache(gguf_src, hub, f"org/m{i}-GGUF")
    stub = write_gguf_stub(tmp_path / "stub.gguf", quant="Q4_0").read_bytes()
    for i in range(10):
        # Distinct blobs: Ollama stores by content.
        write_ollama_model(home / ".ollama/models", f"model{i}", "latest", stub + bytes([i]))
    studio = home / ".lmstudio/models"
    for i in range(5):
        write_mlx_folder(studio / f"mlx-community/m{i}-8bit", bits=8)
        write_gguf_stub(studio / f"lmstudio-community/m{i}-GGUF/m{i}-Q8_0.gguf")
    configured = {}
    for i in range(8):
        configured[f"folder{i}"] = str(write_mlx_folder(tmp_path / f"folders/f{i}"))
        configured[f"gguf{i}"] = str(write_gguf_stub(tmp_path / f"files/g{i}.gguf"))
    return {"HF_HUB_CACHE": str(hub), "HOME": str(home)}, configured


def test_fifty_models_in_under_a_second(tmp_path: Path) -> None:
    environ, configured = build_fifty(tmp_path)
    store = ModelStore(tmp_path / "cache")
    started = time.perf_counter()
    entries = build_catalog(store, CatalogContext(CPU, BUDGET), configured, environ)
    elapsed = time.perf_counter() - started
    print(f"\ncatalog of {len(entries)} models: {elapsed * 1000:.0f} ms")
    assert len(entries) == 50
    assert elapsed < 1.0
    assert not [e for e in entries if e.error]
    by_source: dict[str, int] = {}
    for entry in entries:
        by_source[entry.source] = by_source.get(entry.source, 0) + 1
    assert by_source == {"known": 2, "hf": 12, "ollama": 10, "lmstudio": 10, "folder": 8, "gguf": 8}


def test_entries_say_what_a_tier_needs(tmp_path: Path) -> None:
    environ, configured = build_fifty(tmp_path)
    entries = {
        e.id: e
        for e in build_catalog(
            ModelStore(tmp_path / "c"), CatalogContext(CPU, BUDGET), configured, environ
        )
    }
    hf = entries["hf:mlx-community/model-3-4bit"]
    assert (hf.source, hf.format, hf.architecture, hf.quantization) == (
        "hf",
        "mlx",
        "llama",
        "4-bit (group 64)",
    )
    # 8 packed 4-bit projections of 128x128 plus a 256x128 embedding and the norm.
    assert hf.parameters == 8 * 128 * 128 + 256 * 128 + 128
    assert hf.context_length == 4096 and hf.imported is None and hf.fits
    assert hf.memory_bytes == hf.parameters * 4  # dequantized to float32 on this path
    gguf = entries["hf:org/m1-GGUF"]
    assert (gguf.format, gguf.quantization, gguf.context_length) == ("gguf", "Q8_0", 2048)
    assert gguf.imported is False
    assert entries["ollama:model7:latest"].quantization == "Q4_0"
    assert entries["lmstudio:lmstudio-community/m2-GGUF"].source == "lmstudio"
    assert entries[configured["folder2"]].tiers == ["folder2"]
    assert entries["smollm2-135m-instruct"].source == "known"


def test_a_missing_configured_model_is_listed_with_its_error(tmp_path: Path) -> None:
    entries = build_catalog(
        ModelStore(tmp_path),
        CatalogContext(CPU, BUDGET),
        {"big": "hf:org/absent"},
        {"HOME": str(tmp_path)},
    )
    missing = next(e for e in entries if e.id == "hf:org/absent")
    assert missing.error and "gateway models pull hf:org/absent" in missing.error


def test_a_name_that_is_no_reference_is_listed_not_fatal(tmp_path: Path) -> None:
    write_mlx_folder(tmp_path / "home/.lmstudio/models/pub/my model")
    entries = build_catalog(
        ModelStore(tmp_path / "c"),
        CatalogContext(CPU, BUDGET),
        {},
        {"HOME": str(tmp_path / "home")},
    )
    odd = next(e for e in entries if e.source == "lmstudio")
    assert odd.error and "not usable as a reference" in odd.error


def test_a_damaged_safetensors_header_is_a_clear_error(tmp_path: Path) -> None:
    """A user's truncated or foreign file names itself instead of crashing deeper in."""
    import struct

    import pytest

    from gateway.engines.footprint import read_safetensors_header

    cases = {
        "short": b"\x01\x02",
        "huge": struct.pack("<Q", 1 << 40) + b"{}",
        "list": struct.pack("<Q", 2) + b"[]",
        "entry": struct.pack("<Q", 21) + b'{"w": {"dtype": 1}} ',
    }
    for name, raw in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(raw)
        with pytest.raises(ValueError, match=name):
            read_safetensors_header(path)


def test_a_gguf_shows_its_file_type_not_its_commonest_tensor_type(tmp_path: Path) -> None:
    """Issue 31: a Q4_K_M file whose tensors are mostly Q5_0 was listed as "Q5_0". The file's
    type is ``general.file_type`` (llama.cpp's ``llama_ftype``); without it (or with a value
    this gateway does not know), the ggml type holding most weights."""
    configured = {
        "k_m": str(write_gguf_stub(tmp_path / "k_m.gguf", quant="Q5_0", file_type=15)),
        "f32": str(write_gguf_stub(tmp_path / "f32.gguf", quant="F32", file_type=0)),
        "bare": str(write_gguf_stub(tmp_path / "bare.gguf", quant="Q5_0")),
        "new": str(write_gguf_stub(tmp_path / "new.gguf", quant="Q8_0", file_type=999)),
    }
    entries = build_catalog(
        ModelStore(tmp_path / "c"), CatalogContext(CPU, BUDGET), configured, {"HOME": "/none"}
    )
    quants = {e.tiers[0]: e.quantization for e in entries if e.tiers}
    assert quants == {"k_m": "Q4_K_M", "f32": "F32", "bare": "Q5_0", "new": "Q8_0"}

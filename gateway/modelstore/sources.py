"""Where each model reference (``[tiers.NAME] model = ...``) is on this machine.

A reference is parsed once, at configuration load (``gateway.modelref``: its forms and
syntax, with the standard library alone), then found on disk without network (:func:`locate`:
at start and by ``gateway models list``), then made loadable (:func:`resolve`: a GGUF is
imported into the store, once).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.errors import ModelNotFoundError
from gateway.modelref import ModelRef, SourceKind, is_relative_path, parse_model_ref
from gateway.modelstore import hf_cache, lmstudio, ollama
from gateway.modelstore.gguf.convert import ProgressCallback
from gateway.modelstore.store import ModelStore

__all__ = [  # the references themselves live in gateway.modelref (stdlib only, for config)
    "LocatedModel",
    "ModelRef",
    "ResolvedModel",
    "SourceKind",
    "is_relative_path",
    "locate",
    "parse_model_ref",
    "resolve",
]


@dataclass(frozen=True)
class LocatedModel:
    """Where a reference's files are, found on disk without loading or importing anything."""

    ref: ModelRef
    folder: Path | None  # an mlx-lm folder to load (None: import ``gguf`` first)
    gguf: Path | None = None  # a GGUF file to import into the store
    default_stop: tuple[str, ...] = ()
    # The files are the user's (loaded in place, never removed); False for our imports.
    user_files: bool = True
    # What else the source says (Ollama: params beside stop, a system prompt); shown only.
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The folder name of this model's import in the store."""
        ref = self.ref
        if ref.kind == "known":
            return ref.name
        assert self.gguf is not None, "only GGUF sources are imported"
        if ref.kind == "gguf":
            digest = hashlib.sha1(str(self.gguf).encode()).hexdigest()[:8]
            return _slug("gguf", self.gguf.stem, digest)
        if ref.kind == "ollama":
            return _slug("ollama", ref.name, ref.tag)
        return _slug(ref.kind, ref.name, ref.revision or "", self.gguf.stem)

    def imported_as(self, store: ModelStore) -> str | None:
        """The store's current import of this model (its folder name), or None.

        For a GGUF path this may be an import the store keyed before paths were resolved
        (its folder named after the path as written): the same file, so the same import."""
        if self.ref.kind == "known":
            return self.slug if store.is_imported(self.slug) else None
        if self.gguf is None:
            return None  # loaded in place
        if store.is_current(self.slug, self.gguf):
            return self.slug
        if self.ref.kind != "gguf":
            return None
        return store.find_current(self.gguf, prefix="gguf--")


def _slug(*parts: str) -> str:
    joined = "--".join(p.replace("/", "--") for p in parts if p)
    return re.sub(r"[^A-Za-z0-9._-]", "-", joined)


@dataclass(frozen=True)
class ResolvedModel:
    """A model ready for ``mlx_lm.load``: the folder and the stop strings its source gives."""

    model_id: str  # the reference as written: the tier's model id
    folder: Path
    default_stop: tuple[str, ...]
    user_files: bool  # the user's own folder, loaded in place (False: the store's import)
    source: SourceKind


def is_mlx_folder(folder: Path) -> bool:
    """What ``mlx_lm.load`` opens: a config and ``model*.safetensors`` weights."""
    return (folder / "config.json").is_file() and any(folder.glob("model*.safetensors"))


def gguf_files(folder: Path) -> list[Path]:
    """The GGUF model files of a folder: vision projectors (``mmproj*``) are not models."""
    return sorted(
        p for p in folder.glob("*.gguf") if p.is_file() and not p.name.startswith("mmproj")
    )


def choose_gguf(files: list[Path], selector: str | None, what: str) -> Path:
    """The file ``selector`` names (name, stem or a unique piece such as ``Q4_K_M``); without
    one, the first by name (the only one, usually). A piece that stands alone in the name
    (not inside a longer word) wins over one that does not: ``F16`` is ``x-F16.gguf``, not
    also ``x-BF16.gguf``, which repos often hold side by side."""
    if not files:
        raise ModelNotFoundError(f"{what}: no .gguf file found", param="model")
    if selector is None:
        return files[0]
    wanted = selector.lower()
    exact = [p for p in files if wanted in (p.name.lower(), p.stem.lower())]
    alone = re.compile(rf"(?<![a-z0-9]){re.escape(wanted)}(?![a-z0-9])")
    pieces = [p for p in files if alone.search(p.name.lower())]
    matches = exact or pieces or [p for p in files if wanted in p.name.lower()]
    if len(matches) != 1:
        names = ", ".join(p.name for p in files)
        problem = "matches several files" if matches else "matches no file"
        raise ModelNotFoundError(f"{what}: {selector!r} {problem} of: {names}", param="model")
    return matches[0]


def locate(
    ref: ModelRef, store: ModelStore, environ: Mapping[str, str] | None = None
) -> LocatedModel:
    """Find ``ref``'s files; ModelNotFoundError says where it looked and what to run."""
    if ref.kind == "known":
        return LocatedModel(
            ref, store.path_for(ref.name), None, store.default_stop(ref.name), user_files=False
        )
    if ref.kind in ("folder", "gguf"):
        assert ref.path is not None
        return _locate_path(ref, ref.path)
    if ref.kind == "hf":
        cache = hf_cache.hub_cache_dir(environ)
        folder = hf_cache.snapshot_folder(cache, ref.name, ref.revision)
        if is_mlx_folder(folder) and ref.selector is None:
            return LocatedModel(ref, folder)
        files = gguf_files(folder)
        if files:
            return LocatedModel(ref, None, choose_gguf(files, ref.selector, ref.text))
        raise ModelNotFoundError(
            f"{ref.text}: the cached snapshot {folder} has no model*.safetensors or .gguf "
            f"weights (an incomplete download?): run "
            f"`{hf_cache.pull_command(ref.name, ref.revision, ref.selector)}`",
            param="model",
        )
    if ref.kind == "ollama":
        found = ollama.read_model(ollama.models_dir(environ), ref.name, ref.tag)
        details: dict[str, Any] = {"params": found.params, "system": found.system}
        return LocatedModel(ref, None, found.gguf, found.stop, details=details)
    folder = lmstudio.model_folder(ref.name, environ)
    if is_mlx_folder(folder) and ref.selector is None:
        return LocatedModel(ref, folder)
    return LocatedModel(ref, None, choose_gguf(gguf_files(folder), ref.selector, ref.text))


def _locate_path(ref: ModelRef, path: Path) -> LocatedModel:
    if ref.kind == "gguf":
        if not path.is_file():
            raise ModelNotFoundError(f"model {ref.text!r}: no GGUF file at {path}", param="model")
        return LocatedModel(ref, None, path)
    if not path.is_dir():
        hint = ""
        if not ref.text.startswith(("/", "~", ".")) and ref.text.count("/") == 1:
            hint = f" (for a Hugging Face repo write hf:{ref.text})"
        raise ModelNotFoundError(f"model {ref.text!r}: no folder at {path}{hint}", param="model")
    if is_mlx_folder(path):
        return LocatedModel(ref, path)
    raise ModelNotFoundError(
        f"model {ref.text!r}: {path} is not an mlx-lm model folder (config.json and "
        "model*.safetensors); for a GGUF give the .gguf file's path",
        param="model",
    )


def resolve(
    ref: ModelRef,
    store: ModelStore,
    environ: Mapping[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> ResolvedModel:
    """Locate ``ref`` and make it loadable: a GGUF is imported (once; again if it changed)."""
    located = locate(ref, store, environ)
    if ref.kind == "known":
        folder = store.ensure(ref.name, progress)
    elif located.gguf is not None:
        slug = located.imported_as(store) or located.slug
        folder = store.ensure_gguf(slug, located.gguf, ref.text, progress)
    else:
        assert located.folder is not None
        folder = located.folder
    in_place = located.user_files and located.gguf is None
    return ResolvedModel(ref.text, folder, located.default_stop, in_place, ref.kind)

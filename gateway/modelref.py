"""Model references as written in the settings (``[tiers.NAME] model = ...``): their syntax only.

Parsed once, at configuration load, with the standard library alone: the settings import
this module and nothing of the model store (which brings numpy and the GGUF importer).
Where each reference is on this machine, and making it loadable, is
``gateway.modelstore.sources``. The forms::

    smollm2-135m-instruct             a known id (the embedded models of ``modelstore/store.py``)
    /abs/folder  ~/f  ./f  ../f  a/b  an mlx-lm folder, loaded in place (never copied)
    model.gguf (any path ending so)   a GGUF file, imported into the store
    hf:org/name[@revision][:file]     the local Hugging Face cache; ``file`` picks a GGUF
    ollama:name[:tag]                 Ollama's store (tag ``latest`` by default)
    lmstudio:publisher/model[:file]   LM Studio's folder (MLX in place, or a GGUF imported)

A relative path is relative to the configuration file's folder when it comes from that file
(``config.load_settings`` makes it absolute), else to the current directory; a path is then
resolved (``..``, symlinks), so each file or folder has one store key. ``file`` is a
GGUF file name, its stem, or a piece of it such as a quant type (``Q4_K_M``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# The embedded models' ids (``gateway.modelstore.store.KNOWN_MODELS`` describes each; a
# unit test keeps the two lists the same). The first is the default model.
KNOWN_MODEL_IDS = ("smollm2-135m-instruct", "gemma-3-270m")
DEFAULT_MODEL_ID = KNOWN_MODEL_IDS[0]
OLLAMA_DEFAULT_TAG = "latest"

SourceKind = Literal["known", "folder", "gguf", "hf", "ollama", "lmstudio"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FORMS = (
    "a known id ({known}), a folder or .gguf path (absolute, ~/..., ./...), "
    "hf:org/name[@revision][:file], ollama:name[:tag] or lmstudio:publisher/model[:file]"
)


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference; ``text`` is what the user wrote (the tier's model id)."""

    kind: SourceKind
    text: str
    name: str = ""  # known id, hf repo id, ollama name, lmstudio publisher/model
    revision: str | None = None  # hf: branch, tag or commit
    tag: str = OLLAMA_DEFAULT_TAG  # ollama
    selector: str | None = None  # hf, lmstudio: which GGUF file
    path: Path | None = None  # folder, gguf: absolute, symlinks and ``..`` resolved


def parse_model_ref(text: str, base_dir: Path | None = None) -> ModelRef:
    """Parse ``text`` (syntax only, nothing is looked up); ValueError says what is accepted."""
    text = text.strip()
    prefix, colon, rest = text.partition(":")
    if colon and prefix == "hf":
        repo_rev, _, selector = rest.partition(":")
        repo, _, revision = repo_rev.partition("@")
        _check_two_part(text, repo, "hf:org/name")
        return ModelRef("hf", text, repo, revision or None, selector=selector or None)
    if colon and prefix == "ollama":
        name, tag = rest, OLLAMA_DEFAULT_TAG
        if ":" in rest.rsplit("/", 1)[-1]:
            name, tag = rest.rsplit(":", 1)
        if not name or not all(_NAME.match(p) for p in name.split("/")) or not _NAME.match(tag):
            raise ValueError(f"model {text!r}: expected ollama:name[:tag], e.g. ollama:llama3.2:1b")
        return ModelRef("ollama", text, name, tag=tag)
    if colon and prefix == "lmstudio":
        name, _, selector = rest.partition(":")
        _check_two_part(text, name, "lmstudio:publisher/model")
        return ModelRef("lmstudio", text, name, selector=selector or None)
    if text in KNOWN_MODEL_IDS:
        return ModelRef("known", text, text)
    if text.startswith(("/", "~", ".")) or "/" in text or text.lower().endswith(".gguf"):
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        # One file, one model: ``..``, ``.`` and symlinks are resolved, so every spelling of
        # a path is the same import (issue 31: ``a/../m.gguf`` was imported a second time).
        path = path.resolve()
        kind: SourceKind = "gguf" if text.lower().endswith(".gguf") else "folder"
        return ModelRef(kind, text, path=path)
    raise ValueError(
        f"model {text!r} is not a model reference: use "
        + _FORMS.format(known=", ".join(KNOWN_MODEL_IDS))
        + (f" (a folder in the current directory: ./{text})" if ":" not in text else "")
    )


def _check_two_part(text: str, name: str, form: str) -> None:
    parts = name.split("/")
    if len(parts) != 2 or not all(_NAME.match(p) for p in parts):
        raise ValueError(f"model {text!r}: expected {form}")


def is_relative_path(text: str) -> bool:
    """A path reference that depends on where it is read from (the config's folder)."""
    try:
        ref = parse_model_ref(text)
    except ValueError:
        return False
    return ref.kind in ("folder", "gguf") and not Path(text).expanduser().is_absolute()

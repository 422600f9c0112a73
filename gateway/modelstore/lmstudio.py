"""Models downloaded with LM Studio: ``<root>/<publisher>/<model>/``, MLX folders or GGUF files.

The root is ``$LMSTUDIO_MODELS`` (the gateway's own variable, for a moved models folder), else
``~/.lmstudio/models`` and the older ``~/.cache/lm-studio/models``, in that order (the first
that holds the model wins). An MLX folder is loaded in place; a folder of GGUF files has one
of them imported (chosen by :func:`gateway.modelstore.sources.choose_gguf`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from gateway.errors import ModelNotFoundError


def roots(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The folders LM Studio keeps models in, most recent layout first."""
    env = os.environ if environ is None else environ
    if env.get("LMSTUDIO_MODELS"):
        return [Path(env["LMSTUDIO_MODELS"]).expanduser()]
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def model_folder(name: str, environ: Mapping[str, str] | None = None) -> Path:
    """The folder of ``publisher/model``; ModelNotFoundError naming the places looked in."""
    places = roots(environ)
    for root in places:
        folder = root / name
        if folder.is_dir():
            return folder
    raise ModelNotFoundError(
        f"lmstudio:{name} is not in LM Studio's models folder "
        f"({' or '.join(str(p) for p in places)}; set LMSTUDIO_MODELS if it lives elsewhere); "
        "download it in LM Studio first",
        param="model",
    )


def list_folders(environ: Mapping[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """``(publisher/model, folder)`` for every model folder, each name once."""
    seen: set[str] = set()
    for root in roots(environ):
        if not root.is_dir():
            continue
        for folder in sorted(root.glob("*/*")):
            name = f"{folder.parent.name}/{folder.name}"
            if folder.is_dir() and name not in seen:
                seen.add(name)
                yield name, folder

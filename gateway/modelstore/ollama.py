"""Models pulled with Ollama: its manifests and content-addressed blobs, read in place.

Layout (``shared/MODELS.md`` §7): ``<root>/manifests/<host>/<namespace>/<name>/<tag>`` is a
JSON manifest whose ``layers`` carry a ``mediaType`` and a ``digest``; the layer
``application/vnd.ollama.image.model`` is the GGUF, at ``<root>/blobs/sha256-<hex>``. Plain
names live under ``registry.ollama.ai/library``; ``namespace/name`` under
``registry.ollama.ai/namespace``; ``hf.co/org/repo`` under ``hf.co/org/repo``.

What the gateway takes from the other layers (our choices, written in the README):
- ``.params``: its ``stop`` list becomes the tier's default stop strings; the sampling values
  (temperature, top_p...) are shown by ``gateway models show`` but not applied: requests keep
  the OpenAI defaults the clients expect.
- ``.template`` (a Go template) is ignored: the GGUF's own Jinja ``tokenizer.chat_template``
  renders chats.
- ``.system`` is shown but not applied: a client sends its own system message.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.errors import ModelNotFoundError
from gateway.modelref import OLLAMA_DEFAULT_TAG

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = OLLAMA_DEFAULT_TAG
MEDIA_PREFIX = "application/vnd.ollama.image."


def models_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$OLLAMA_MODELS``, else ``~/.ollama/models`` (read from the environment as it is now)."""
    env = os.environ if environ is None else environ
    if env.get("OLLAMA_MODELS"):
        return Path(env["OLLAMA_MODELS"]).expanduser()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".ollama" / "models"


def manifest_path(root: Path, name: str, tag: str = DEFAULT_TAG) -> Path:
    """Where Ollama keeps the manifest of ``name:tag``."""
    parts = name.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    return root.joinpath("manifests", *parts, tag)


def display_name(host: str, namespace: str, name: str) -> str:
    """The name as ``ollama run`` takes it: library models bare, others with their prefix."""
    if host == DEFAULT_HOST:
        return name if namespace == DEFAULT_NAMESPACE else f"{namespace}/{name}"
    return f"{host}/{namespace}/{name}"


@dataclass(frozen=True)
class OllamaModel:
    """One tag of an Ollama model: its GGUF blob and what its other layers say."""

    name: str
    tag: str
    gguf: Path
    stop: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    system: str | None = None
    has_go_template: bool = False

    @property
    def reference(self) -> str:
        return f"ollama:{self.name}:{self.tag}"


# A layer's digest names its blob: nothing else (no separator, no ``..``) may reach the path.
_DIGEST = re.compile(r"^sha256[:-][0-9a-f]{64}$")


def _digest(value: Any) -> str:
    """A manifest's layer digest, or ValueError: a manifest is input, and a digest such as
    ``sha256:../../../etc/passwd`` would name a file outside the blobs folder."""
    if not isinstance(value, str) or not _DIGEST.match(value):
        raise ValueError(f"{str(value)[:80]!r} is not a sha256 digest")
    return value


def _blob(root: Path, digest: str) -> Path:
    return root / "blobs" / _digest(digest).replace(":", "-")


def read_model(root: Path, name: str, tag: str = DEFAULT_TAG) -> OllamaModel:
    """Read the manifest of ``name:tag`` and its small layers; the GGUF blob is not opened."""
    path = manifest_path(root, name, tag)
    if not path.is_file():
        raise ModelNotFoundError(
            f"ollama:{name}:{tag} is not in the Ollama store ({root}; set OLLAMA_MODELS if it "
            f"lives elsewhere); the gateway downloads nothing: run `ollama pull {name}:{tag}`",
            param="model",
        )
    return _from_manifest(root, name, tag, path)


def _from_manifest(root: Path, name: str, tag: str, path: Path) -> OllamaModel:
    try:
        manifest = json.loads(path.read_text())
        layers = {
            layer["mediaType"].removeprefix(MEDIA_PREFIX): _digest(layer["digest"])
            for layer in manifest.get("layers", [])
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelNotFoundError(f"ollama:{name}:{tag}: unreadable manifest {path}: {exc}") from exc
    if "model" not in layers:
        raise ModelNotFoundError(f"ollama:{name}:{tag}: its manifest has no model layer ({path})")
    gguf = _blob(root, layers["model"])
    if not gguf.is_file():
        raise ModelNotFoundError(
            f"ollama:{name}:{tag}: the model blob {gguf.name} is missing; run `ollama pull "
            f"{name}:{tag}` again"
        )
    params: dict[str, Any] = {}
    if "params" in layers:
        params = _json_blob(root, layers["params"])
    system = None
    if "system" in layers and _blob(root, layers["system"]).is_file():
        system = _blob(root, layers["system"]).read_text(errors="replace")
    stop = params.get("stop") or []
    return OllamaModel(
        name=name,
        tag=tag,
        gguf=gguf,
        stop=tuple(str(s) for s in (stop if isinstance(stop, list) else [stop])),
        params={k: v for k, v in params.items() if k != "stop"},
        system=system,
        has_go_template="template" in layers,
    )


def _json_blob(root: Path, digest: str) -> dict[str, Any]:
    try:
        value = json.loads(_blob(root, digest).read_text())
    except (OSError, ValueError):
        return {}  # a damaged params layer costs only the defaults, not the model
    return value if isinstance(value, dict) else {}


def list_models(root: Path) -> Iterator[OllamaModel]:
    """Every tag in the store; manifests that do not lead to a GGUF are skipped."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for path in sorted(manifests.glob("*/*/*/*")):
        if not path.is_file():
            continue
        tag = path.name
        name_dir = path.parent
        host, namespace = name_dir.parent.parent.name, name_dir.parent.name
        try:
            yield _from_manifest(root, display_name(host, namespace, name_dir.name), tag, path)
        except ModelNotFoundError:
            continue

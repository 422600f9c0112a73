"""The local Hugging Face cache: where it is, which snapshot a repo id names, and the one pull.

The gateway resolves ``hf:org/name[@revision]`` itself, by reading the cache's own layout
(``models--org--name/refs/<revision>`` holds a commit id, ``snapshots/<commit>/`` the files),
and hands mlx-lm a folder: ``mlx_lm.load("org/name")`` would ask the Hub even when the cache is
complete (``shared/MODELS.md`` §7). Nothing here touches the network except :func:`pull`, the
one explicit download (``gateway models pull``).

The cache folder is read from the environment each time it is asked for, as huggingface_hub
itself would at import (``HF_HUB_CACHE``, legacy ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``,
``XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``): huggingface_hub reads them
only once, so :func:`pull` passes ``cache_dir`` explicitly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.errors import ModelImportError, ModelNotFoundError

# What ``gateway models pull`` fetches: weights, config, tokenizer and chat template only (no
# PyTorch .bin duplicates, no ONNX, no README images). A GGUF repo's files are fetched only
# when a file selector names one (``hf:org/name:Q4_K_M``): such repos hold dozens of them.
PULL_PATTERNS = (
    "*.json",
    "*.safetensors",
    "*.jinja",
    "tokenizer*",
    "*.model",  # sentencepiece
    "*.tiktoken",
    "*.txt",  # merges.txt, vocab.txt
    "*.py",  # a few tokenizers ship their own code (never run by the gateway)
)


def hub_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The hub cache folder, from the environment as it is now."""
    env = os.environ if environ is None else environ
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return Path(os.path.expandvars(env[name])).expanduser()
    if env.get("HF_HOME"):
        return Path(os.path.expandvars(env["HF_HOME"])).expanduser() / "hub"
    base = env.get("XDG_CACHE_HOME") or str(_home(env) / ".cache")
    return Path(base).expanduser() / "huggingface" / "hub"


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def pull_command(repo_id: str, revision: str | None = None, selector: str | None = None) -> str:
    ref = (
        f"hf:{repo_id}"
        + (f"@{revision}" if revision else "")
        + (f":{selector}" if selector else "")
    )
    return f"gateway models pull {ref}"


def snapshot_folder(cache: Path, repo_id: str, revision: str | None = None) -> Path:
    """The cached snapshot of ``repo_id`` at ``revision`` (a branch, tag or commit; default main).

    Raises ModelNotFoundError naming ``gateway models pull`` when it is not cached.
    """
    wanted = revision or "main"
    repo = repo_folder(cache, repo_id)
    ref_file = repo / "refs" / wanted
    if not _inside(ref_file, repo / "refs"):
        raise ModelNotFoundError(
            f"hf:{repo_id}: revision {wanted!r} is not a branch, tag or commit"
        )
    if ref_file.is_file():
        commit = ref_file.read_text(errors="replace").strip()
    elif (repo / "snapshots" / wanted).is_dir():
        commit = wanted  # a commit id given as the revision
    else:
        where = f"revision {wanted!r} of " if revision else ""
        raise ModelNotFoundError(
            f"{where}hf:{repo_id} is not in the Hugging Face cache ({cache}); nothing is "
            f"downloaded at serve time: run `{pull_command(repo_id, revision)}` first",
            param="model",
        )
    folder = repo / "snapshots" / commit
    if not _COMMIT.match(commit) or not _inside(folder, repo / "snapshots"):
        # The cache is input: a ref holding "../../elsewhere" would load any folder.
        raise ModelNotFoundError(
            f"hf:{repo_id}: refs/{wanted} holds {commit[:80]!r}, not a commit id; the cache "
            f"entry is damaged: run `{pull_command(repo_id, revision)}`",
            param="model",
        )
    if not folder.is_dir():
        raise ModelNotFoundError(
            f"hf:{repo_id}: refs/{wanted} names commit {commit}, which is not in the cache "
            f"({cache}); run `{pull_command(repo_id, revision)}`",
            param="model",
        )
    return folder


# A snapshot folder's name: a commit id (the hub's are 40 hex digits; shorter ones are
# accepted, as a revision may name one). Never a path.
_COMMIT = re.compile(r"^[0-9a-f]{1,64}$")


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (before following its own last link) stays inside ``folder``."""
    return os.path.normpath(path).startswith(os.path.normpath(folder) + os.sep)


@dataclass(frozen=True)
class CachedRepo:
    """One repo snapshot found in the cache (for the catalog)."""

    repo_id: str
    revision: str | None  # None: main
    folder: Path


def cached_repos(cache: Path) -> Iterator[CachedRepo]:
    """Every model repo in the cache, at each of its refs (main shown without a revision)."""
    if not cache.is_dir():
        return
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        refs = repo / "refs"
        names = sorted(p.name for p in refs.iterdir() if p.is_file()) if refs.is_dir() else []
        for name in names:
            commit = (refs / name).read_text(errors="replace").strip()
            folder = repo / "snapshots" / commit
            if _COMMIT.match(commit) and folder.is_dir():
                yield CachedRepo(repo_id, None if name == "main" else name, folder)


# The default is huggingface_hub's own function, imported only when a pull is asked for.
SnapshotDownload = Callable[..., Any]


def pull(
    repo_id: str,
    revision: str | None = None,
    selector: str | None = None,
    cache: Path | None = None,
    snapshot_download: SnapshotDownload | None = None,
) -> Path:
    """Download ``repo_id`` into the cache (progress bars from huggingface_hub) and return the
    snapshot folder. A ``selector`` adds the GGUF files whose names contain it."""
    cache = cache or hub_cache_dir()
    if snapshot_download is None:
        import huggingface_hub

        snapshot_download = huggingface_hub.snapshot_download
    patterns = list(PULL_PATTERNS)
    if selector:
        patterns.append(selector if selector.endswith(".gguf") else f"*{selector}*.gguf")
    try:
        folder = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=str(cache),
            allow_patterns=patterns,
        )
    except Exception as exc:  # huggingface_hub's errors: offline, unknown repo, gated, HTTP
        offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise ModelImportError(
            f"could not download hf:{repo_id}{offline}: {type(exc).__name__}: {exc}. "
            "`gateway models pull` needs the network and access to the repo on huggingface.co"
        ) from exc
    return Path(folder)

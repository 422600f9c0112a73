"""The Hugging Face cache: its folder from the environment now, and the one explicit pull."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.errors import ModelImportError
from gateway.modelstore import hf_cache
from tests.unit.modelstore.layouts import place_in_hf_cache, write_mlx_folder


def test_cache_folder_from_the_environment() -> None:
    assert hf_cache.hub_cache_dir({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == Path("/a")
    assert hf_cache.hub_cache_dir({"HF_HOME": "/b"}) == Path("/b/hub")
    assert hf_cache.hub_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/huggingface/hub")
    assert hf_cache.hub_cache_dir({"HOME": "/h"}) == Path("/h/.cache/huggingface/hub")


def test_cached_repos_lists_each_ref(tmp_path: Path) -> None:
    src = write_mlx_folder(tmp_path / "src")
    place_in_hf_cache(src, tmp_path / "hub", "org/one")
    snapshot = place_in_hf_cache(src, tmp_path / "hub", "org/two", "abc")
    (tmp_path / "hub/models--org--two/refs/v1").write_text("abc")
    (tmp_path / "hub/models--org--broken/refs").mkdir(parents=True)
    (tmp_path / "hub/models--org--broken/refs/main").write_text("missing")
    repos = list(hf_cache.cached_repos(tmp_path / "hub"))
    assert [(r.repo_id, r.revision) for r in repos] == [
        ("org/one", None),
        ("org/two", None),
        ("org/two", "v1"),
    ]
    assert repos[1].folder == snapshot


def test_pull_asks_for_weights_config_and_tokenizer_only(tmp_path: Path) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def fake(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return str(tmp_path / "snapshot")

    folder = hf_cache.pull("org/name", "v1", None, tmp_path / "hub", snapshot_download=fake)
    assert folder == tmp_path / "snapshot"
    ((args, kwargs),) = calls
    assert args == ("org/name",)
    assert kwargs["revision"] == "v1"
    assert kwargs["cache_dir"] == str(tmp_path / "hub")  # explicit: the env is read now
    assert "local_files_only" not in kwargs
    patterns = kwargs["allow_patterns"]
    assert {"*.safetensors", "*.json", "tokenizer*", "*.jinja"} <= set(patterns)
    assert not any(p.endswith(".gguf") for p in patterns)  # a GGUF repo has dozens
    hf_cache.pull("org/m-GGUF", None, "Q4_K_M", tmp_path / "hub", snapshot_download=fake)
    assert "*Q4_K_M*.gguf" in calls[-1][1]["allow_patterns"]


def test_pull_offline_is_a_clear_error(tmp_path: Path) -> None:
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(*args: Any, **kwargs: Any) -> str:
        raise LocalEntryNotFoundError("Cannot reach https://huggingface.co: connection error")

    with pytest.raises(
        ModelImportError, match=r"could not download hf:org/name.*needs the network"
    ):
        hf_cache.pull("org/name", cache=tmp_path, snapshot_download=offline)


def test_pull_command_names_the_reference() -> None:
    assert hf_cache.pull_command("o/n", "v1", "Q8_0") == "gateway models pull hf:o/n@v1:Q8_0"

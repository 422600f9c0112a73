"""Model references: parsed at config load, found on disk (hand-made layouts), never fetched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings
from gateway.errors import ModelNotFoundError
from gateway.modelstore.sources import (
    LocatedModel,
    ModelRef,
    choose_gguf,
    locate,
    parse_model_ref,
)
from gateway.modelstore.store import ModelStore
from tests.unit.modelstore.layouts import place_in_hf_cache, write_mlx_folder, write_ollama_model


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "smollm2-135m-instruct",
            ModelRef("known", "smollm2-135m-instruct", "smollm2-135m-instruct"),
        ),
        ("hf:org/name", ModelRef("hf", "hf:org/name", "org/name")),
        (
            "hf:org/name@v2:Q4_K_M",
            ModelRef("hf", "hf:org/name@v2:Q4_K_M", "org/name", "v2", selector="Q4_K_M"),
        ),
        ("ollama:llama3.2", ModelRef("ollama", "ollama:llama3.2", "llama3.2", tag="latest")),
        ("ollama:llama3.2:1b", ModelRef("ollama", "ollama:llama3.2:1b", "llama3.2", tag="1b")),
        (
            "ollama:hf.co/org/repo:Q8_0",
            ModelRef("ollama", "ollama:hf.co/org/repo:Q8_0", "hf.co/org/repo", tag="Q8_0"),
        ),
        ("lmstudio:pub/model", ModelRef("lmstudio", "lmstudio:pub/model", "pub/model")),
        (
            "lmstudio:pub/model:q8_0",
            ModelRef("lmstudio", "lmstudio:pub/model:q8_0", "pub/model", selector="q8_0"),
        ),
        ("/abs/folder", ModelRef("folder", "/abs/folder", path=Path("/abs/folder"))),
        ("./rel", ModelRef("folder", "./rel", path=Path("/base/rel"))),
        ("m/x.GGUF", ModelRef("gguf", "m/x.GGUF", path=Path("/base/m/x.GGUF"))),
    ],
)
def test_parse(text: str, expected: ModelRef) -> None:
    assert parse_model_ref(text, Path("/base")) == expected


def test_parse_home_relative() -> None:
    assert parse_model_ref("~/m.gguf").path == (Path.home() / "m.gguf").resolve()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("hf:org", "hf:org/name"),
        ("hf:a/b/c", "hf:org/name"),
        ("ollama:", "ollama:name"),
        ("lmstudio:x", "lmstudio:publisher/model"),
        ("qwen3", "./qwen3"),
        ("s3:bucket", "not a model reference"),
    ],
)
def test_parse_errors_say_what_is_accepted(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace(".", r"\.")):
        parse_model_ref(text)


def test_config_checks_the_syntax_and_anchors_paths_at_the_file(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text('[tiers.a]\nmodel = "hf:just-a-name"\n')
    with pytest.raises(ConfigError, match="hf:org/name"):
        load_settings(config, environ={})
    config.write_text(
        '[tiers.a]\nmodel = "models/mine"\n[tiers.b]\nmodel = "hf:org/name"\n'
        '[aliases]\n"mine" = "models/mine"\n"b2" = "b"\n'
    )
    settings = load_settings(config, environ={})
    assert settings.tiers["a"].model == str(tmp_path / "models/mine")
    assert settings.aliases == {"mine": str(tmp_path / "models/mine"), "b2": "b"}
    with pytest.raises(ConfigError, match="not a model reference"):
        load_settings(environ={"GATEWAY_DEFAULT_MODEL": "nonsense"})


def test_folder_and_gguf_paths(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "cache")
    folder = write_mlx_folder(tmp_path / "mine")
    located = locate(parse_model_ref(str(folder)), store)
    assert (located.folder, located.gguf, located.user_files) == (folder, None, True)
    with pytest.raises(ModelNotFoundError, match="not an mlx-lm model folder"):
        locate(parse_model_ref(str(tmp_path)), store)
    with pytest.raises(ModelNotFoundError, match="write hf:org/name"):
        locate(parse_model_ref("org/name", tmp_path), store)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert locate(parse_model_ref(str(gguf)), store).gguf == gguf
    with pytest.raises(ModelNotFoundError, match="no GGUF file"):
        locate(parse_model_ref(str(tmp_path / "gone.gguf")), store)


def test_hf_cache_snapshot_by_ref_and_by_commit(tmp_path: Path) -> None:
    store, hub = ModelStore(tmp_path / "cache"), tmp_path / "hub"
    snapshot = place_in_hf_cache(write_mlx_folder(tmp_path / "src"), hub, "org/name", "c0ffee")
    assert os.readlink(snapshot / "config.json").startswith("../../blobs/")
    env = {"HF_HUB_CACHE": str(hub)}
    assert locate(parse_model_ref("hf:org/name"), store, env).folder == snapshot
    assert locate(parse_model_ref("hf:org/name@c0ffee"), store, env).folder == snapshot
    with pytest.raises(ModelNotFoundError, match=r"run `gateway models pull hf:org/other`"):
        locate(parse_model_ref("hf:org/other"), store, env)
    with pytest.raises(ModelNotFoundError, match=r"gateway models pull hf:org/name@v9"):
        locate(parse_model_ref("hf:org/name@v9"), store, env)
    # HF_HOME/hub is the cache when HF_HUB_CACHE is not set.
    home_env = {"HF_HOME": str(tmp_path / "hfhome")}
    place_in_hf_cache(tmp_path / "src", tmp_path / "hfhome" / "hub", "org/name")
    assert locate(parse_model_ref("hf:org/name"), store, home_env).folder is not None


def test_hf_gguf_only_repo_imports_the_chosen_file(tmp_path: Path) -> None:
    store, hub, src = ModelStore(tmp_path / "cache"), tmp_path / "hub", tmp_path / "src"
    src.mkdir()
    for name in ("m-Q4_K_M.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf"):
        (src / name).write_bytes(b"GGUF" + name.encode())
    place_in_hf_cache(src, hub, "org/m-GGUF")
    env = {"HF_HUB_CACHE": str(hub)}
    located = locate(parse_model_ref("hf:org/m-GGUF:q8_0"), store, env)
    assert located.folder is None and located.gguf is not None
    assert located.gguf.name == "m-Q8_0.gguf"
    assert located.slug == "hf--org--m-GGUF--m-Q8_0"
    # No selector: the first by name (the projector is not a model).
    assert locate(parse_model_ref("hf:org/m-GGUF"), store, env).gguf.name == "m-Q4_K_M.gguf"  # type: ignore[union-attr]


def test_choose_gguf(tmp_path: Path) -> None:
    files = [tmp_path / n for n in ("a-Q4_K_M.gguf", "a-Q4_K_S.gguf", "a-Q8_0.gguf")]
    assert choose_gguf(files, "Q8_0", "x") == files[2]
    assert choose_gguf(files, "a-Q4_K_S", "x") == files[1]
    assert choose_gguf(files, None, "x") == files[0]
    with pytest.raises(ModelNotFoundError, match="matches several"):
        choose_gguf(files, "Q4_K", "x")
    with pytest.raises(ModelNotFoundError, match="matches no file"):
        choose_gguf(files, "Q2", "x")


def test_choose_gguf_prefers_a_piece_that_stands_alone(tmp_path: Path) -> None:
    """``F16`` is also inside ``BF16``: found by ops/check_model_sources.py, where a repo of
    every quant type made ``hf:org/m-GGUF:F16`` ambiguous."""
    names = ("m-BF16.gguf", "m-F16.gguf", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-IQ4_XS.gguf")
    files = [tmp_path / n for n in names]
    assert choose_gguf(files, "F16", "x") == files[1]
    assert choose_gguf(files, "bf16", "x") == files[0]
    assert choose_gguf(files, "Q4_K_M", "x") == files[2]
    assert choose_gguf(files, "4_XS", "x") == files[4]  # a piece inside a word still works
    with pytest.raises(ModelNotFoundError, match="matches several"):
        choose_gguf(files, "Q4_K", "x")  # _M or _S: both stand alone


def test_ollama_store(tmp_path: Path) -> None:
    store, root = ModelStore(tmp_path / "cache"), tmp_path / "ollama"
    blob = write_ollama_model(
        root,
        "llama3.2",
        "1b",
        b"GGUF1",
        params={"stop": ["<|eot_id|>"], "temperature": 0.6},
        system="Be brief.",
    )
    write_ollama_model(root, "hf.co/org/repo", "Q8_0", b"GGUF2")
    env = {"OLLAMA_MODELS": str(root)}
    located = locate(parse_model_ref("ollama:llama3.2:1b"), store, env)
    assert located.gguf == blob
    assert located.default_stop == ("<|eot_id|>",)
    assert located.details == {"params": {"temperature": 0.6}, "system": "Be brief."}
    assert located.slug == "ollama--llama3.2--1b"
    other = locate(parse_model_ref("ollama:hf.co/org/repo:Q8_0"), store, env)
    assert other.gguf is not None and other.gguf.read_bytes() == b"GGUF2"
    with pytest.raises(ModelNotFoundError, match=r"ollama pull llama3\.2:latest"):
        locate(parse_model_ref("ollama:llama3.2"), store, env)
    # Without OLLAMA_MODELS: ~/.ollama/models under HOME.
    write_ollama_model(tmp_path / "home/.ollama/models", "qwen3", "latest", b"GGUF3")
    assert locate(parse_model_ref("ollama:qwen3"), store, {"HOME": str(tmp_path / "home")}).gguf


def test_lmstudio_folders(tmp_path: Path) -> None:
    store, home = ModelStore(tmp_path / "cache"), tmp_path / "home"
    mlx = write_mlx_folder(home / ".lmstudio/models/mlx-community/m-4bit")
    ggufs = home / ".cache/lm-studio/models/lmstudio-community/m-GGUF"
    ggufs.mkdir(parents=True)
    for name in ("m-Q8_0.gguf", "m-Q4_K_M.gguf"):
        (ggufs / name).write_bytes(b"GGUF")
    env = {"HOME": str(home)}
    assert locate(parse_model_ref("lmstudio:mlx-community/m-4bit"), store, env).folder == mlx
    chosen = locate(parse_model_ref("lmstudio:lmstudio-community/m-GGUF"), store, env)
    assert chosen.gguf == ggufs / "m-Q4_K_M.gguf"  # the first by name
    picked = locate(parse_model_ref("lmstudio:lmstudio-community/m-GGUF:Q8_0"), store, env)
    assert picked.gguf == ggufs / "m-Q8_0.gguf"
    moved = {"LMSTUDIO_MODELS": str(home / ".lmstudio/models")}
    with pytest.raises(ModelNotFoundError, match="LMSTUDIO_MODELS"):
        locate(parse_model_ref("lmstudio:lmstudio-community/m-GGUF"), store, moved)


def test_known_ids_are_the_stores_own(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    located = locate(parse_model_ref("gemma-3-270m"), store)
    assert located == LocatedModel(
        parse_model_ref("gemma-3-270m"),
        store.path_for("gemma-3-270m"),
        None,
        store.default_stop("gemma-3-270m"),
        user_files=False,
    )


def test_every_spelling_of_a_path_is_one_model(tmp_path: Path) -> None:
    """Issue 31: ``a/../m.gguf`` was keyed as written and imported a second time (8 minutes,
    617 MB). ``..``, ``.`` and symlinks (to the file or a folder above it) are resolved."""
    store = ModelStore(tmp_path / "cache")
    gguf = tmp_path / "models" / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    (tmp_path / "link.gguf").symlink_to(gguf)
    (tmp_path / "alias").symlink_to(gguf.parent, target_is_directory=True)
    spellings = [
        (str(gguf), None),
        (f"{tmp_path}/models/../models/./m.gguf", None),
        ("models/../models/m.gguf", tmp_path),
        ("./m.gguf", gguf.parent),
        ("../models/m.gguf", gguf.parent),
        ("link.gguf", tmp_path),
        (f"{tmp_path}/alias/m.gguf", None),
    ]
    located = [locate(parse_model_ref(text, base), store) for text, base in spellings]
    assert {m.gguf for m in located} == {gguf}
    assert {m.slug for m in located} == {located[0].slug}
    folder = write_mlx_folder(tmp_path / "mine")
    assert locate(parse_model_ref("x/../mine", tmp_path), store).folder == folder


@pytest.mark.parametrize(
    "digest",
    ["sha256:../../../secret.gguf", "sha256-../../x", "/etc/passwd", "sha256:" + "0" * 63, 7],
)
def test_an_ollama_manifest_cannot_name_a_file_outside_its_blobs(
    tmp_path: Path, digest: object
) -> None:
    """A manifest is input: a digest that is not one (``..``, a path, not hex) is refused
    with a clear error, and nothing outside the blobs folder is opened."""
    import json

    store, root = ModelStore(tmp_path / "cache"), tmp_path / "ollama"
    write_ollama_model(root, "evil", "latest", b"GGUF1")
    (tmp_path / "secret.gguf").write_bytes(b"GGUF outside the store")
    manifest = root / "manifests/registry.ollama.ai/library/evil/latest"
    data = json.loads(manifest.read_text())
    data["layers"][0]["digest"] = digest
    manifest.write_text(json.dumps(data))
    with pytest.raises(ModelNotFoundError, match="not a sha256 digest"):
        locate(parse_model_ref("ollama:evil"), store, {"OLLAMA_MODELS": str(root)})


@pytest.mark.parametrize("ref", ["../../../outside", "c0ffee/../../../../outside", "/etc"])
def test_a_hugging_face_ref_names_a_commit_never_a_path(tmp_path: Path, ref: str) -> None:
    """The cache is input: a ref file holding a path would load any folder on the disk."""
    store, hub = ModelStore(tmp_path / "cache"), tmp_path / "hub"
    outside = write_mlx_folder(tmp_path / "outside")
    place_in_hf_cache(outside, hub, "org/model")
    (hub / "models--org--model/refs/main").write_text(ref)
    with pytest.raises(ModelNotFoundError, match="not a commit id"):
        locate(parse_model_ref("hf:org/model"), store, {"HF_HUB_CACHE": str(hub)})
    with pytest.raises(ModelNotFoundError, match="not a branch, tag or commit"):
        locate(parse_model_ref("hf:org/model@../../x"), store, {"HF_HUB_CACHE": str(hub)})


def test_the_settings_know_the_same_embedded_models_as_the_store() -> None:
    from gateway import modelref
    from gateway.modelstore.store import DEFAULT_MODEL_ID, KNOWN_MODELS

    assert tuple(KNOWN_MODELS) == modelref.KNOWN_MODEL_IDS
    assert modelref.DEFAULT_MODEL_ID == DEFAULT_MODEL_ID


def test_reading_the_settings_imports_neither_the_model_store_nor_numpy() -> None:
    import subprocess
    import sys

    probe = "import sys, gateway.config; print(sorted(m for m in sys.modules if 'numpy' in m or 'modelstore' in m))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def damaged_hf_repo(hub: Path, case: str) -> None:
    """One repo ``org/model`` in ``hub`` damaged as ``case`` says."""
    repo = hub / "models--org--model"
    snapshot = repo / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("deadbeef" if case == "ref names nothing" else "c0ffee")
    if case == "missing blobs":
        (snapshot / "config.json").symlink_to("../../blobs/gone")
        (snapshot / "model.safetensors").symlink_to("../../blobs/gone-too")
    elif case == "symlink loop":
        (snapshot / "config.json").symlink_to("config.json")
        (snapshot / "model.safetensors").symlink_to("model.safetensors")


@pytest.mark.parametrize("case", ["ref names nothing", "missing blobs", "symlink loop"])
def test_a_damaged_hugging_face_cache_entry_is_a_clear_error(tmp_path: Path, case: str) -> None:
    store, hub = ModelStore(tmp_path / "cache"), tmp_path / "hub"
    damaged_hf_repo(hub, case)
    with pytest.raises(ModelNotFoundError, match="gateway models pull hf:org/model"):
        locate(parse_model_ref("hf:org/model"), store, {"HF_HUB_CACHE": str(hub)})


def test_a_config_that_is_not_json_is_a_clear_cli_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    folder = write_mlx_folder(tmp_path / "m")
    (folder / "config.json").write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "models", "show", str(folder)],
        capture_output=True,
        text=True,
        env={"GATEWAY_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 1 and "unreadable" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr

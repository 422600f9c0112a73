"""Small random-weight models of real architectures, built offline with mlx-lm's own classes.

No hub is reachable here, and no package ships a qwen3 or a qwen3_moe model. Benchmarks and
tests build one instead: random weights (seeded) in mlx-lm's own model class of the
architecture, the tokenizer of a shipped model (SmolLM2's, imported by ``make setup``), and
optionally extra special tokens (``<think>``, ``<tool_call>``) and a family's real chat
template, so that reasoning and tool formats can be exercised on a real tokenizer.

The result is an ordinary mlx-lm model folder (``config.json``, ``model.safetensors``,
tokenizer files), loadable by ``mlx_lm.load``; the same weights are the reference a test
compares an imported copy with.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The architectures the model-source tests cover, each with a small shape. ``mistral`` is
# mlx-lm's llama class under mistral's model_type.
SHAPES: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama"},
    "mistral": {"model_type": "mistral"},
    "qwen2": {"model_type": "qwen2", "tie_word_embeddings": True},
    "qwen3": {"model_type": "qwen3", "head_dim": 32, "tie_word_embeddings": True},
    "gemma3": {
        "model_type": "gemma3_text",
        "head_dim": 32,
        "sliding_window": 512,
        "sliding_window_pattern": 2,
        "query_pre_attn_scalar": 32,
        "rope_local_base_freq": 10000.0,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "head_dim": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "tie_word_embeddings": True,
    },
}


@dataclass(frozen=True)
class SyntheticSpec:
    """What to build. Sizes default to a model that loads in well under a second."""

    architecture: str
    hidden_size: int = 64
    num_hidden_layers: int = 2
    intermediate_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0
    dtype: str = "float32"  # float32, float16 or bfloat16
    # MLX affine quantization of the linear layers, e.g. {"group_size": 64, "bits": 4}.
    quantization: dict[str, int] | None = None
    extra_special_tokens: Sequence[str] = ()
    chat_template: str | None = None  # None: the tokenizer's own (ChatML for SmolLM2)
    overrides: dict[str, Any] = field(default_factory=dict)
    # Also write model.safetensors.index.json (mlx_lm.convert's layout; pipeline sharding
    # reads it to find each rank's layers).
    weight_index: bool = False

    def config(self, vocab_size: int) -> dict[str, Any]:
        if self.architecture not in SHAPES:
            raise ValueError(f"unknown architecture {self.architecture!r}: {', '.join(SHAPES)}")
        config: dict[str, Any] = {
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "rms_norm_eps": 1e-6,
            "vocab_size": vocab_size,
            "rope_theta": 10000.0,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": False,
        }
        config.update(SHAPES[self.architecture])
        config.update(self.overrides)
        return config


def default_tokenizer_folder() -> Path:
    """The imported SmolLM2 folder (``make setup`` imports it) whose tokenizer is reused."""
    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore

    return ModelStore(default_cache_dir()).ensure(DEFAULT_MODEL_ID)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _write_tokenizer(spec: SyntheticSpec, source: Path, out: Path) -> int:
    """Copy (or extend) the shipped tokenizer into ``out``; returns its vocabulary size."""
    if not spec.extra_special_tokens and spec.chat_template is None:
        for name in (*_TOKENIZER_FILES, "chat_template.jinja"):
            if (source / name).is_file():
                shutil.copy(source / name, out / name)
        tokens = json.loads((source / "tokenizer.json").read_text())
        vocab = tokens["model"]["vocab"]
        added = [t["id"] for t in tokens.get("added_tokens", [])]
        return max([*vocab.values(), *added]) + 1
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(source))
    if spec.extra_special_tokens:
        tokenizer.add_tokens(list(spec.extra_special_tokens), special_tokens=True)
    if spec.chat_template is not None:
        tokenizer.chat_template = spec.chat_template
    tokenizer.save_pretrained(str(out))
    return len(tokenizer)


def build_synthetic(spec: SyntheticSpec, out: Path, tokenizer_from: Path | None = None) -> Path:
    """Write an mlx-lm model folder for ``spec`` into ``out`` (created) and return it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.utils import _get_classes, quantize_model

    out.mkdir(parents=True, exist_ok=True)
    vocab_size = _write_tokenizer(spec, tokenizer_from or default_tokenizer_folder(), out)
    config = spec.config(vocab_size)
    model_class, args_class = _get_classes(config)
    mx.random.seed(spec.seed)
    model = model_class(args_class.from_dict(config))
    dtype = getattr(mx, spec.dtype)
    # Random init gives norms of one and small weights; a larger spread keeps logits from
    # being nearly uniform, so that a wrong import shows as a large difference.
    model.update(
        tree_map(
            lambda a: (a * 4.0).astype(dtype) if a.ndim > 1 else a.astype(dtype), model.parameters()
        )
    )
    if spec.quantization:
        model, config = quantize_model(
            model, config, spec.quantization["group_size"], spec.quantization["bits"]
        )
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    if spec.weight_index:
        index = {"metadata": {}, "weight_map": dict.fromkeys(sorted(weights), "model.safetensors")}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config.pop("quantization_config", None)
    if "quantization" in config:
        config["quantization"] = {
            k: v for k, v in config["quantization"].items() if not isinstance(v, dict)
        }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def place_in_hf_cache(folder: Path, cache: Path, repo_id: str, commit: str | None = None) -> Path:
    """Lay ``folder``'s files out as the Hugging Face hub cache does, by hand (no network):
    ``models--{org}--{name}/refs/main`` holds the commit id, ``snapshots/<commit>/<file>`` are
    relative links to ``blobs/<sha256>``. Returns the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)  # no trailing newline, as the hub writes it
    for file in sorted(p for p in folder.iterdir() if p.is_file()):
        digest = hashlib.sha256()
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                digest.update(block)
        blob = repo / "blobs" / digest.hexdigest()
        if not blob.exists():
            shutil.copyfile(file, blob)
        link = snapshot / file.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path("../..") / "blobs" / blob.name)
    return snapshot


def write_ollama_model(
    root: Path,
    name: str,
    tag: str,
    gguf: bytes,
    *,
    params: dict[str, Any] | None = None,
    system: str | None = None,
) -> Path:
    """An Ollama store entry as ``ollama pull`` leaves it: blobs by digest and a manifest.
    ``name`` may be ``llama3.2``, ``ns/name`` or ``hf.co/org/repo``. Returns the GGUF blob."""
    from gateway.modelstore.ollama import manifest_path

    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes, kind: str) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest.replace(":", "-")).write_bytes(data)
        media = f"application/vnd.ollama.image.{kind}"
        return {"mediaType": media, "digest": digest, "size": len(data)}

    layers = [blob(gguf, "model"), blob(b"{{ .Prompt }}", "template")]
    if params is not None:
        layers.append(blob(json.dumps(params).encode(), "params"))
    if system is not None:
        layers.append(blob(system.encode(), "system"))
    config = blob(b"{}", "config")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config,
        "layers": layers,
    }
    path = manifest_path(root, name, tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return blobs / layers[0]["digest"].replace(":", "-")


def small_tokenizer(source: Path, out: Path, size: int = 1024) -> Path:
    """``source``'s byte-level BPE tokenizer (SmolLM2's) cut to its first ``size`` ids (merges
    kept where all three fit), with its chat template: models over it build in a fraction of
    a second. Returns ``out``, to pass to :func:`build_synthetic` as ``tokenizer_from``."""
    data = json.loads((source / "tokenizer.json").read_text())
    vocab = {t: i for t, i in data["model"]["vocab"].items() if i < size}
    merges = [
        m
        for m in data["model"]["merges"]
        if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab
    ]
    data["model"].update(vocab=vocab, merges=merges)
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < size]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(data))
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    return out

"""Turn a llama-architecture GGUF file into a folder that ``mlx_lm.load`` reads.

The facts used here (tensor names, ``rope_traditional``, the tokenizer recipe) were verified
once and are recorded in ``shared/MODELS.md``; this module only applies them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ProgressCallback = Callable[[str], None]

# GGUF block tensor suffix -> mlx-lm llama module path (inside model.layers.N).
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_CONTROL_TOKEN_TYPE = 3


def mlx_name(gguf_name: str) -> str:
    """Map one GGUF tensor name (``blk.3.attn_q.scales``) to its mlx-lm llama name."""
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        layer, module, leaf = parts[1], parts[2], parts[3]
        return f"model.layers.{layer}.{_BLOCK_NAMES[module]}.{leaf}"
    module, leaf = parts[0], parts[1]
    return f"{_TOP_NAMES[module]}.{leaf}"


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def llama_config(metadata: dict[str, Any], quantization: dict[str, Any] | None) -> dict[str, Any]:
    """Build mlx-lm's config.json from the GGUF ``llama.*`` metadata."""
    get = lambda key: _scalar(metadata[f"llama.{key}"])  # noqa: E731
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": get("embedding_length"),
        "num_hidden_layers": get("block_count"),
        "intermediate_size": get("feed_forward_length"),
        "num_attention_heads": get("attention.head_count"),
        "num_key_value_heads": get("attention.head_count_kv"),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "vocab_size": len(metadata["tokenizer.ggml.tokens"]),
        "rope_theta": float(get("rope.freq_base")),
        "max_position_embeddings": get("context_length"),
        "tie_word_embeddings": True,
        # llama.cpp's converter permutes Q/K rows for its RoPE layout; the traditional
        # (interleaved) RoPE matches that layout without un-permuting the weights.
        "rope_traditional": True,
        "bos_token_id": _scalar(metadata["tokenizer.ggml.bos_token_id"]),
        "eos_token_id": _scalar(metadata["tokenizer.ggml.eos_token_id"]),
    }
    if quantization:
        config["quantization"] = quantization
    return config


def build_tokenizer(metadata: dict[str, Any]) -> Any:
    """Build a byte-level BPE ``PreTrainedTokenizerFast`` from GGUF tokenizer metadata."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
    token_types = [int(t) for t in metadata["tokenizer.ggml.token_type"].tolist()]
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    specials = [
        tok for tok, kind in zip(tokens, token_types, strict=True) if kind == _CONTROL_TOKEN_TYPE
    ]
    tokenizer.add_special_tokens(specials)

    def token(key: str) -> str:
        return tokens[int(_scalar(metadata[key]))]

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        chat_template=metadata["tokenizer.chat_template"],
        clean_up_tokenization_spaces=False,
    )


def convert_llama_gguf(gguf_path: Path, out_dir: Path, progress: ProgressCallback) -> None:
    """Write config.json, model.safetensors and the tokenizer files for ``gguf_path``."""
    import mlx.core as mx

    progress(f"reading {gguf_path.name}")
    weights, metadata = cast(
        tuple[dict[str, Any], dict[str, Any]], mx.load(str(gguf_path), return_metadata=True)
    )
    if _scalar(metadata.get("general.architecture")) != "llama":
        raise ValueError(f"{gguf_path.name}: only llama-architecture GGUF files are supported")

    progress(f"renaming {len(weights)} tensors")
    renamed = {mlx_name(name): array for name, array in weights.items()}
    quantized = any(name.endswith(".scales") for name in renamed)
    # Q4_1 arrives already in MLX's affine layout: 4 bits, groups of 32.
    quantization = {"group_size": 32, "bits": 4, "mode": "affine"} if quantized else None

    progress("writing weights")
    mx.save_safetensors(str(out_dir / "model.safetensors"), renamed, metadata={"format": "mlx"})
    (out_dir / "config.json").write_text(json.dumps(llama_config(metadata, quantization), indent=2))

    progress("building tokenizer")
    build_tokenizer(metadata).save_pretrained(str(out_dir))

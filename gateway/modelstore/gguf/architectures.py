"""llama.cpp's architectures as mlx-lm models: tensor names and config.json, one table each.

What differs per architecture, and why (MODELS.md sections 1 and 2 hold the measurements):
- llama (Mistral too: llama.cpp writes ``general.architecture = "llama"`` for it): llama.cpp's
  converter permutes the Q/K rows of ``LlamaModel`` for its RoPE layout. mlx-lm's traditional
  (interleaved) RoPE matches that layout, so the rows stay as they are and config.json says
  ``rope_traditional: true``. Qwen and Gemma GGUFs are not permuted.
- gemma3: llama.cpp stores every RMSNorm weight as 1 + w; mlx-lm's Gemma RMSNorm adds the 1
  itself, so the importer subtracts it. Three values the GGUF does not carry are hard-coded in
  llama.cpp (sliding-window pattern 6, local RoPE base 10000, query scale 1/sqrt(head_dim),
  hidden/heads for the 62-layer 27B) and are written the same way here.
- qwen3 and qwen3moe add per-head Q/K norms; qwen3moe stores its experts stacked
  (``ffn_*_exps``, [experts, out, in]), which is mlx-lm's ``switch_mlp`` layout already.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_COMMON_BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_QK_NORM = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
_GEMMA_BLOCK = {
    **_COMMON_BLOCK,
    **_QK_NORM,
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_MOE_BLOCK = {
    **_COMMON_BLOCK,
    **_QK_NORM,
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Tensors with no mlx-lm counterpart: llama 3's RoPE frequency factors become config instead.
SKIPPED = {"rope_freqs"}

Metadata = dict[str, Any]


@dataclass(frozen=True)
class Architecture:
    """How one llama.cpp architecture becomes one mlx-lm model class."""

    gguf_name: str
    model_type: str  # mlx-lm's
    block_names: dict[str, str]  # blk.N.<gguf module> -> model.layers.N.<mlx module>
    # Stored as 1 + w by llama.cpp (Gemma): subtract this from those tensors.
    norm_offset: float
    config: Callable[[Metadata, set[str]], dict[str, Any]]

    def mlx_name(self, gguf_name: str) -> str | None:
        """The mlx-lm name of a GGUF tensor, or None for one that has no counterpart."""
        parts = gguf_name.split(".")
        if parts[0] == "blk":
            module = self.block_names.get(parts[2])
            if module is None:
                raise ValueError(f"{gguf_name}: no {self.model_type} counterpart")
            return f"model.layers.{parts[1]}.{module}.{'.'.join(parts[3:])}"
        if parts[0] in SKIPPED:
            return None
        if parts[0] not in TOP_NAMES:
            raise ValueError(f"{gguf_name}: no {self.model_type} counterpart")
        return f"{TOP_NAMES[parts[0]]}.{'.'.join(parts[1:])}"

    def is_norm(self, gguf_name: str) -> bool:
        """Whether the tensor is an RMSNorm weight (all of llama.cpp's names end in "norm")."""
        parts = gguf_name.split(".")
        return (parts[2] if parts[0] == "blk" else parts[0]).endswith("norm")


def _int(value: Any) -> int:
    # head_count_kv may be an array (one per layer) in some files: the largest one serves all.
    if hasattr(value, "__len__") and not isinstance(value, str):
        return int(max(value))
    return int(value)


def _base_config(arch: str, meta: Metadata, tensors: set[str]) -> dict[str, Any]:
    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    heads = _int(get("attention.head_count"))
    config: dict[str, Any] = {
        "hidden_size": _int(get("embedding_length")),
        "num_hidden_layers": _int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": _int(get("attention.head_count_kv", heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": _int(get("context_length", 4096)),
        # No separate output matrix: the embedding is reused (mlx-lm ties it).
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    if get("feed_forward_length") is not None:
        config["intermediate_size"] = _int(get("feed_forward_length"))
    if get("attention.key_length") is not None:
        config["head_dim"] = _int(get("attention.key_length"))
    if get("vocab_size") is not None:
        config["vocab_size"] = _int(get("vocab_size"))
    scaling = get("rope.scaling.type")
    if scaling == "linear" and get("rope.scaling.factor"):
        config["rope_scaling"] = {"type": "linear", "factor": float(get("rope.scaling.factor"))}
    return config


def _llama(meta: Metadata, tensors: set[str]) -> dict[str, Any]:
    config = _base_config("llama", meta, tensors)
    config.update(model_type="llama", rope_traditional=True)
    return config


def _qwen2(meta: Metadata, tensors: set[str]) -> dict[str, Any]:
    config = _base_config("qwen2", meta, tensors)
    config.update(model_type="qwen2")
    config.pop("head_dim", None)  # qwen2 derives it from hidden / heads
    return config


def _qwen3(meta: Metadata, tensors: set[str]) -> dict[str, Any]:
    config = _base_config("qwen3", meta, tensors)
    config.update(model_type="qwen3")
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    return config


def _qwen3moe(meta: Metadata, tensors: set[str]) -> dict[str, Any]:
    config = _base_config("qwen3moe", meta, tensors)
    expert_ff = _int(meta["qwen3moe.expert_feed_forward_length"])
    config.update(
        model_type="qwen3_moe",
        num_experts=_int(meta["qwen3moe.expert_count"]),
        num_experts_per_tok=_int(meta["qwen3moe.expert_used_count"]),
        moe_intermediate_size=expert_ff,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        # llama.cpp normalizes the top-k weights for qwen3moe unless told otherwise.
        norm_topk_prob=bool(meta.get("qwen3moe.expert_weights_norm", True)),
    )
    config.setdefault("intermediate_size", expert_ff)
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    return config


def _gemma3(meta: Metadata, tensors: set[str]) -> dict[str, Any]:
    config = _base_config("gemma3", meta, tensors)
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    head_dim = config.setdefault("head_dim", 256)
    config.update(
        model_type="gemma3_text",
        sliding_window=_int(meta.get("gemma3.attention.sliding_window", 512)),
        # Hard-coded in llama.cpp's llama-model.cpp for LLM_ARCH_GEMMA3.
        rope_local_base_freq=10000.0,
        sliding_window_pattern=6,
        query_pre_attn_scalar=config["hidden_size"] // heads if layers == 62 else head_dim,
    )
    config.pop("tie_word_embeddings", None)  # gemma3_text always ties
    return config


SUPPORTED: tuple[Architecture, ...] = (
    Architecture("llama", "llama", _COMMON_BLOCK, 0.0, _llama),
    Architecture("qwen2", "qwen2", _COMMON_BLOCK, 0.0, _qwen2),
    Architecture("qwen3", "qwen3", {**_COMMON_BLOCK, **_QK_NORM}, 0.0, _qwen3),
    Architecture("qwen3moe", "qwen3_moe", _MOE_BLOCK, 0.0, _qwen3moe),
    Architecture("gemma3", "gemma3_text", _GEMMA_BLOCK, 1.0, _gemma3),
)
SUPPORTED_ARCHITECTURES: dict[str, Architecture] = {a.gguf_name: a for a in SUPPORTED}

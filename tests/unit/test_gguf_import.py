from __future__ import annotations

from gateway.modelstore.gguf_import import mlx_name


def test_tensor_names_map_to_mlx_lm_llama() -> None:
    assert mlx_name("token_embd.weight") == "model.embed_tokens.weight"
    assert mlx_name("output_norm.weight") == "model.norm.weight"
    assert mlx_name("blk.7.attn_q.scales") == "model.layers.7.self_attn.q_proj.scales"
    assert mlx_name("blk.0.ffn_down.biases") == "model.layers.0.mlp.down_proj.biases"
    assert mlx_name("blk.29.ffn_norm.weight") == "model.layers.29.post_attention_layernorm.weight"

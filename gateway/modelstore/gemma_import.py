"""Turn the Gemma 3 GGUF (Q4_K_M) into a folder that ``mlx_lm.load`` reads.

The facts applied here were verified once against llama.cpp and are recorded in
``shared/MODELS.md`` section 2: norms minus one (llama.cpp stores 1 + w, MLX's Gemma RMSNorm
computes 1 + w itself), no Q/K permutation, three config values the GGUF does not carry, and a
tokenizer rebuilt from the GGUF vocabulary (which has no merges).

Weights are repacked, not re-quantized: ggml's Q8_0, Q5_0 and Q4_K blocks are affine
(``w = scale * q + bias`` over groups of 32), which is exactly MLX's quantization, so their
integers move over bit for bit with float32 scales and biases. Only Q6_K (16-element groups
with their own scales) cannot: those tensors are dequantized and quantized again to MLX 8-bit.
MLX packs the integers of a row bit-contiguously, little-endian.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from gateway.modelstore.gguf_import import ProgressCallback

GROUP_SIZE = 32
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
_NORMS = {
    "attn_norm",
    "post_attention_norm",
    "ffn_norm",
    "post_ffw_norm",
    "attn_q_norm",
    "attn_k_norm",
    "output_norm",
}
_CONTROL, _USER_DEFINED, _BYTE = 3, 4, 6
# A base model has no chat template: a chat is a plain transcript, and the model's turn ends
# where it starts writing the user's next line (the gateway adds that stop string).
TRANSCRIPT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}User: {{ message['content'] }}\n"
    "{% else %}Assistant: {{ message['content'] }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
TRANSCRIPT_STOP = ("\nUser:",)


def mlx_name(gguf_name: str) -> tuple[str, bool]:
    """The mlx-lm name of a GGUF tensor, and whether it is one of the seven norms."""
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        module = parts[2]
        return f"model.layers.{parts[1]}.{_BLOCK_NAMES[module]}.{parts[3]}", module in _NORMS
    return f"{_TOP_NAMES[parts[0]]}.{parts[1]}", parts[0] in _NORMS


# -- repacking ggml blocks into MLX affine quantization ----------------------------------------


def pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned integers (rows, n) of ``bits`` each into uint32 words, as MLX does."""
    rows, n = q.shape
    expanded = (q[..., None].astype(np.uint32) >> np.arange(bits, dtype=np.uint32)) & 1
    packed = np.packbits(
        expanded.reshape(rows, n * bits).astype(np.uint8), axis=-1, bitorder="little"
    )
    return packed.view(np.uint32)


def _f16(raw: np.ndarray) -> np.ndarray:
    return raw.copy().view(np.float16).astype(np.float32)


def repack_q8_0(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Q8_0: 32 int8 and one f16 scale per block: w = d * q = d * (q + 128) - 128 d."""
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, 34)
    d = _f16(blocks[..., :2]).reshape(rows, -1)
    q = blocks[..., 2:].view(np.int8).astype(np.int16) + 128
    return pack_bits(q.reshape(rows, -1).astype(np.uint8), 8), d, -128.0 * d, 8


def repack_q5_0(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Q5_0: 32 five-bit values per block (low nibbles + a 32-bit word of high bits):
    w = d * (q - 16)."""
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, 22)
    d = _f16(blocks[..., :2]).reshape(rows, -1)
    qh = blocks[..., 2:6].copy().view(np.uint32)  # (rows, nb, 1)
    qs = blocks[..., 6:22].astype(np.uint32)  # (rows, nb, 16)
    j = np.arange(16, dtype=np.uint32)
    low = (qs & 0x0F) | (((qh >> j) & 1) << 4)
    high = (qs >> 4) | (((qh >> (j + 16)) & 1) << 4)
    q = np.concatenate([low, high], axis=-1).reshape(rows, -1)
    return pack_bits(q, 5), d, -16.0 * d, 5


def _q4k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of a Q4_K super-block (ggml's get_scale_min_k4)."""
    s = scales.astype(np.uint32)
    sc = np.empty((*s.shape[:-1], 8), np.uint32)
    mn = np.empty_like(sc)
    sc[..., :4] = s[..., 0:4] & 63
    mn[..., :4] = s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    return sc, mn


def repack_q4_k(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Q4_K: 256-value super-blocks of eight 32-groups: w = d * sc * q - dmin * m."""
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, 144)
    d = _f16(blocks[..., 0:2])  # (rows, nb, 1)
    dmin = _f16(blocks[..., 2:4])
    sc, mn = _q4k_scale_min(blocks[..., 4:16])
    qs = blocks[..., 16:144].reshape(rows, -1, 4, 32)  # four 64-value chunks of 32 bytes
    # Each chunk: low nibbles are its first 32 values, high nibbles the next 32.
    q = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(rows, -1)
    scale = (d * sc.astype(np.float32)).reshape(rows, -1)
    bias = -(dmin * mn.astype(np.float32)).reshape(rows, -1)
    return pack_bits(q, 4), scale, bias, 4


REPACKERS = {"Q8_0": repack_q8_0, "Q5_0": repack_q5_0, "Q4_K": repack_q4_k}


def convert_tensor(tensor: Any) -> tuple[dict[str, Any], int | None]:
    """One GGUF tensor as mlx-lm arrays (weight, and scales/biases when quantized)."""
    import mlx.core as mx
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    name, is_norm = mlx_name(tensor.name)
    kind = tensor.tensor_type.name
    data = np.asarray(tensor.data)
    if kind in REPACKERS:
        weight, scales, biases, bits = REPACKERS[kind](data)
        stem = name.removesuffix(".weight")
        return {
            name: mx.array(weight),
            f"{stem}.scales": mx.array(scales.astype(np.float32)),
            f"{stem}.biases": mx.array(biases.astype(np.float32)),
        }, bits
    values = dequantize(data, GGMLQuantizationType[kind]).astype(np.float32)
    if is_norm:
        values = values - 1.0
    if kind in ("F32", "F16", "BF16"):
        return {name: mx.array(values)}, None
    # Q6_K and anything else: 8-bit with float32 scales (the closest MLX has).
    packed, q_scales, q_biases = mx.quantize(mx.array(values), group_size=GROUP_SIZE, bits=8)
    stem = name.removesuffix(".weight")
    return {name: packed, f"{stem}.scales": q_scales, f"{stem}.biases": q_biases}, 8


# -- config and tokenizer ------------------------------------------------------------------


def _field(reader: Any, key: str) -> Any:
    return reader.fields[key].contents()


def gemma3_config(reader: Any) -> dict[str, Any]:
    get = lambda key: _field(reader, f"gemma3.{key}")  # noqa: E731
    return {
        "model_type": "gemma3_text",
        "hidden_size": int(get("embedding_length")),
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": int(get("attention.head_count")),
        "num_key_value_heads": int(get("attention.head_count_kv")),
        "head_dim": int(get("attention.key_length")),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
        "rope_theta": float(get("rope.freq_base")),
        "sliding_window": int(get("attention.sliding_window")),
        "max_position_embeddings": int(get("context_length")),
        # Not in the GGUF: llama.cpp hard-codes them for Gemma 3.
        "rope_local_base_freq": 10000.0,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 256,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": [1, 106],  # <eos>, <end_of_turn>
        "quantization": {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"},
    }


def build_tokenizer(reader: Any) -> Any:
    """SentencePiece-style BPE with byte fallback, its merges derived from the vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
    types = [int(t) for t in _field(reader, "tokenizer.ggml.token_type")]
    # Space runs are stored with real spaces; the normalizer turns spaces into "▁".
    tokens = [t.replace(" ", "▁") if t and not t.strip(" ") else t for t in tokens]
    vocab = {token: index for index, token in enumerate(tokens)}
    merges: list[tuple[int, str, str]] = []
    for index, (token, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind in (_CONTROL, _BYTE) or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                merges.append((index, left, right))
    merges.sort(key=lambda merge: merge[0])  # a lower id is a more frequent piece
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=[(left, right) for _, left, right in merges],
            byte_fallback=True,
            unk_token="<unk>",
            fuse_unk=True,
        )
    )
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, types, strict=True)
            if k == _CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=True)
            for t, k in zip(tokens, types, strict=True)
            if k == _USER_DEFINED
        ]
    )
    bos = tokens[int(_field(reader, "tokenizer.ggml.bos_token_id"))]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, vocab[bos])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=bos,
        eos_token=tokens[int(_field(reader, "tokenizer.ggml.eos_token_id"))],
        pad_token=tokens[int(_field(reader, "tokenizer.ggml.padding_token_id"))],
        unk_token=tokens[int(_field(reader, "tokenizer.ggml.unknown_token_id"))],
        chat_template=TRANSCRIPT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def convert_gemma3_gguf(gguf_path: Path, out_dir: Path, progress: ProgressCallback) -> None:
    """Write config.json, model.safetensors and the tokenizer files for ``gguf_path``."""
    import mlx.core as mx
    from gguf import GGUFReader

    progress(f"reading {gguf_path.name}")
    reader = GGUFReader(str(gguf_path))
    if _field(reader, "general.architecture") != "gemma3":
        raise ValueError(f"{gguf_path.name}: not a Gemma 3 GGUF file")
    progress(f"repacking {len(reader.tensors)} tensors")
    weights: dict[str, Any] = {}
    for tensor in reader.tensors:
        arrays, _bits = convert_tensor(tensor)
        weights.update(arrays)
    progress("writing weights")
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out_dir / "config.json").write_text(json.dumps(gemma3_config(reader), indent=2))
    progress("building tokenizer (merges from the vocabulary)")
    build_tokenizer(reader).save_pretrained(str(out_dir))

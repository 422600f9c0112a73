"""GGUF files written from synthetic mlx-lm folders, as llama.cpp's converter writes them.

Tests of the GGUF importer need GGUF files of every supported architecture and quant type,
and no hub is reachable. ``write_gguf`` takes a folder from ``synthetic.build_synthetic`` and
writes what ``convert_hf_to_gguf.py`` would: llama.cpp's tensor names, Q/K rows permuted for
llama (``LlamaModel.permute``), Gemma's norms stored as 1 + w, MoE experts stacked, 1-D
tensors and the MoE router in F32, and the tokenizer as metadata (tokens, token types, merges,
pre-tokenizer name, special ids, chat template), through gguf-py's ``GGUFWriter``.

Quantization: gguf-py quantizes Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 from the float weights. It
cannot quantize the K types, so for Q2_K…Q6_K this writes random but valid blocks (small f16
super-block scales, random 6-bit/8-bit sub-scales and quants): those weights do not come from
the float model, and the reference is gguf-py's own dequantization of the same bytes
(``reference_weights``). K types need rows that are multiples of 256; llama.cpp keeps other
rows in a fallback type, and this writer keeps them F16.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import numpy as np

from testsupport.synthetic import SyntheticSpec

# mlx-lm model_type -> llama.cpp architecture (mistral is written as llama, as llama.cpp does).
GGUF_ARCHITECTURE = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3moe",
    "gemma3_text": "gemma3",
}
# mlx-lm module (inside model.layers.N) -> llama.cpp block tensor, as convert_hf_to_gguf maps
# the Hugging Face names (gguf-py's tensor_mapping.py).
_BLOCK = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp",
    "mlp.switch_mlp.gate_proj": "ffn_gate_exps",
    "mlp.switch_mlp.up_proj": "ffn_up_exps",
    "mlp.switch_mlp.down_proj": "ffn_down_exps",
}
_GEMMA_BLOCK = {
    **_BLOCK,
    "pre_feedforward_layernorm": "ffn_norm",
    "post_attention_layernorm": "post_attention_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}
_LLAMA_BLOCK = {**_BLOCK, "post_attention_layernorm": "ffn_norm"}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
_FILE_TYPES = {
    "F32": "ALL_F32",
    "F16": "MOSTLY_F16",
    "BF16": "MOSTLY_BF16",
    "Q4_0": "MOSTLY_Q4_0",
    "Q4_1": "MOSTLY_Q4_1",
    "Q5_0": "MOSTLY_Q5_0",
    "Q5_1": "MOSTLY_Q5_1",
    "Q8_0": "MOSTLY_Q8_0",
    "Q2_K": "MOSTLY_Q2_K",
    "Q3_K": "MOSTLY_Q3_K_M",
    "Q4_K": "MOSTLY_Q4_K_M",
    "Q5_K": "MOSTLY_Q5_K_M",
    "Q6_K": "MOSTLY_Q6_K",
}


def gguf_name(model_type: str, mlx_name: str) -> str:
    """llama.cpp's name for an mlx-lm tensor name (``model.layers.3.mlp.up_proj.weight``)."""
    stem, leaf = mlx_name.rsplit(".", 1)
    if stem.startswith("model.layers."):
        _, _, layer, module = stem.split(".", 3)
        table = _GEMMA_BLOCK if model_type == "gemma3_text" else _LLAMA_BLOCK
        return f"blk.{layer}.{table[module]}.{leaf}"
    return f"{_TOP[stem]}.{leaf}"


def permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute`` of Q/K rows (its RoPE pairs adjacent rows)."""
    half = weights.shape[0] // n_head // 2
    return (
        weights.reshape(n_head, 2, half, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)
    )


def unpermute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of ``permute`` (for the reference weights)."""
    half = weights.shape[0] // n_head // 2
    return (
        weights.reshape(n_head, half, 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)
    )


def _qk_heads(config: dict[str, Any], mlx_name: str) -> int | None:
    """Heads to permute by, for a llama Q or K projection; None for anything else."""
    if config["model_type"] not in ("llama", "mistral"):
        return None
    if mlx_name.endswith("self_attn.q_proj.weight"):
        return int(config["num_attention_heads"])
    if mlx_name.endswith("self_attn.k_proj.weight"):
        return int(config.get("num_key_value_heads", config["num_attention_heads"]))
    return None


def _random_k_blocks(kind: str, rows: int, columns: int, rng: np.random.Generator) -> np.ndarray:
    """Valid random K-quant blocks: any byte pattern is a valid block once the f16 super-block
    scales are sane, so those are set small (weights of roughly ±0.3)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    qtype = GGMLQuantizationType[kind]
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows, columns // block, size), dtype=np.uint8)

    def f16(values: np.ndarray) -> np.ndarray:
        return values.astype(np.float16).view(np.uint8).reshape(rows, -1, 2)

    n = (rows, columns // block)
    spread = rng.uniform(0.5, 1.5, size=n)
    if kind in ("Q4_K", "Q5_K", "Q2_K"):
        levels = {"Q4_K": 15 * 63, "Q5_K": 31 * 63, "Q2_K": 3 * 15}[kind]
        d = 0.6 / levels * spread
        dmin = d * levels / (2 * (63 if kind != "Q2_K" else 15))
        at = 0 if kind != "Q2_K" else size - 4
        blocks[..., at : at + 2] = f16(d)
        blocks[..., at + 2 : at + 4] = f16(dmin)
    elif kind == "Q3_K":
        blocks[..., size - 2 :] = f16(0.3 / (4 * 32) * spread)
    elif kind == "Q6_K":
        scales = rng.integers(1, 64, size=(rows, columns // block, 8, 2)).astype(np.int8)
        # Half of the 32-groups get two halves on one grid (equal, or one twice the other),
        # as some real groups do: those repack exactly, the rest are re-quantized.
        same = rng.random((rows, columns // block, 8)) < 0.5
        double = rng.random((rows, columns // block, 8)) < 0.5
        first = scales[..., 0]
        scales[..., 1] = np.where(same, np.where(double, first * 2 % 127, first), scales[..., 1])
        blocks[..., 192:208] = scales.reshape(rows, -1, 16).view(np.uint8)
        blocks[..., 208:210] = f16(0.3 / (32 * 64) * spread)
    return blocks.reshape(rows, -1)


def _encode(
    name: str, array: np.ndarray, kind: str, rng: np.random.Generator
) -> tuple[np.ndarray, Any]:
    """The bytes (or floats) of one tensor in ``kind`` and the raw dtype to write it with."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    qtype = GGMLQuantizationType[kind]
    if kind == "F32":
        return array.astype(np.float32), None
    if kind == "F16":
        return array.astype(np.float16), None
    if kind in K_TYPES:
        flat = array.reshape(-1, array.shape[-1])
        data = _random_k_blocks(kind, flat.shape[0], flat.shape[1], rng)
        return data.reshape(*array.shape[:-1], -1), qtype
    return quantize(array.astype(np.float32), qtype), qtype


def _tensor_type(config: dict[str, Any], gguf: str, shape: tuple[int, ...], quant: str) -> str:
    """The type llama.cpp's converter/quantizer gives this tensor."""
    if len(shape) == 1 or ".ffn_gate_inp." in gguf:
        return "F32"  # norms, biases and the MoE router stay F32
    if quant in K_TYPES and shape[-1] % 256:
        return "F16"  # llama.cpp falls back for rows that are not whole super-blocks
    return quant


def _tokenizer_metadata(writer: Any, folder: Path, vocab_size: int, pre: str) -> None:
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    tokens = [""] * vocab_size
    types = [1] * vocab_size  # normal
    for token, index in tokenizer["model"]["vocab"].items():
        tokens[index] = token
    for added in tokenizer.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = 3 if added.get("special") else 4  # control / user-defined
    for index, token in enumerate(tokens):
        if not token:  # padding rows past the tokenizer's vocabulary
            tokens[index], types[index] = f"[PAD{index}]", 5  # unused
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    ids = {token: index for index, token in enumerate(tokens)}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (
        ("bos_token", writer.add_bos_token_id),
        ("eos_token", writer.add_eos_token_id),
        ("unk_token", writer.add_unk_token_id),
        ("pad_token", writer.add_pad_token_id),
    ):
        value = settings.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value in ids:
            add(ids[value])
    writer.add_add_bos_token(False)
    template = settings.get("chat_template")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text()
    if template:
        writer.add_chat_template(template)


def _copy_tokenizer_metadata(writer: Any, vocab: Path, vocab_size: int) -> None:
    """Every ``tokenizer.*`` key of ``vocab`` as it is (token ids as u32, flags as bools)."""
    from gateway.modelstore.gguf.reader import read_gguf

    meta = read_gguf(vocab).metadata
    if len(meta["tokenizer.ggml.tokens"]) != vocab_size:
        raise ValueError(
            f"{vocab.name}: {len(meta['tokenizer.ggml.tokens'])} tokens, not {vocab_size}"
        )
    for key, value in meta.items():
        if not key.startswith("tokenizer."):
            continue
        if isinstance(value, np.ndarray):
            if value.dtype == np.uint8:  # a byte blob (T5's precompiled charsmap)
                raise ValueError(f"{key}: byte arrays are not copied")
            writer.add_array(key, value.tolist())
        elif isinstance(value, list):
            writer.add_array(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, str(value))


def _hparams(writer: Any, arch: str, config: dict[str, Any]) -> None:
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(config.get("num_key_value_heads", heads)))
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(int(config["vocab_size"]))
    if arch == "llama":
        writer.add_rope_dimension_count(head_dim)
    if "head_dim" in config or arch in ("gemma3", "qwen3", "qwen3moe"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch == "gemma3":
        writer.add_sliding_window(int(config["sliding_window"]))
    if arch == "qwen3moe":
        writer.add_expert_count(int(config["num_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))


def gguf_spec(architecture: str, *, dtype: str = "float32", k_quant: bool = False) -> SyntheticSpec:
    """The ``SyntheticSpec`` a GGUF test model is built from: ``dtype`` float16 / bfloat16 for
    F16 / BF16 files (the file then holds the folder's weights exactly, see
    :func:`folder_dtype`); ``k_quant``: rows of whole 256-value super-blocks, as K types need."""
    overrides: dict[str, Any] = {}
    sizes: dict[str, Any] = {}
    if architecture == "gemma3":
        # llama.cpp hard-codes these for Gemma 3 (the GGUF cannot say otherwise), and mlx-lm
        # needs at least one whole pattern of layers.
        overrides = {"sliding_window_pattern": 6, "query_pre_attn_scalar": 32}
        sizes["num_hidden_layers"] = 6
    if k_quant:
        sizes.update(hidden_size=256, intermediate_size=256, num_attention_heads=8)
        if architecture == "qwen3_moe":
            overrides["moe_intermediate_size"] = 256
    return SyntheticSpec(architecture, dtype=dtype, overrides=overrides, **sizes)


def folder_dtype(quant_type: str) -> str:
    """The dtype of the synthetic folder a GGUF of ``quant_type`` is written from."""
    return {"F16": "float16", "BF16": "bfloat16"}.get(quant_type, "float32")


def write_gguf(
    folder: Path,
    out: Path,
    quant_type: str,
    pre: str = "smollm",
    seed: int = 0,
    vocab: Path | None = None,
) -> Path:
    """Write ``folder`` (a float synthetic mlx-lm model) as a GGUF file of ``quant_type``.

    ``pre`` is the ``tokenizer.ggml.pre`` name llama.cpp gives the folder's tokenizer
    (SmolLM2's: "smollm"). ``vocab``: a GGUF (llama.cpp's ``ggml-vocab-*.gguf``) whose
    ``tokenizer.*`` metadata is written instead of the folder's tokenizer (the folder's
    ``vocab_size`` must be its token count).
    """
    import mlx.core as mx
    from gguf import GGUFWriter, LlamaFileType

    config = json.loads((folder / "config.json").read_text())
    if "quantization" in config:
        raise ValueError("write_gguf takes a float model folder")
    model_type = config["model_type"]
    arch = GGUF_ARCHITECTURE[model_type]
    weights = cast(dict[str, Any], mx.load(str(folder / "model.safetensors")))
    writer = GGUFWriter(str(out), arch)
    writer.add_name(f"synthetic {model_type}")
    writer.add_file_type(LlamaFileType[_FILE_TYPES[quant_type]])
    writer.add_quantization_version(2)
    _hparams(writer, arch, config)
    if vocab is None:
        _tokenizer_metadata(writer, folder, int(config["vocab_size"]), pre)
    else:
        _copy_tokenizer_metadata(writer, vocab, int(config["vocab_size"]))
    rng = np.random.default_rng(seed)
    for mlx_name in sorted(weights):
        array = np.array(weights[mlx_name].astype(mx.float32))
        if mlx_name == "lm_head.weight" and config.get("tie_word_embeddings", True):
            continue
        name = gguf_name(model_type, mlx_name)
        heads = _qk_heads(config, mlx_name)
        if heads is not None:
            array = permute(array, heads)
        if model_type == "gemma3_text" and name.endswith("norm.weight"):
            array = array + 1.0  # llama.cpp's Gemma converter stores 1 + w
        kind = _tensor_type(config, name, array.shape, quant_type)
        if kind == "BF16":  # numpy has no bfloat16: MLX rounds, the bytes go in as they are
            raw = np.array(mx.array(array).astype(mx.bfloat16).view(mx.uint16)).view(np.uint8)
            writer.add_tensor(name, raw, raw_dtype=_qtype("BF16"))
            continue
        data, raw_dtype = _encode(name, array, kind, rng)
        if raw_dtype is None:
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _qtype(kind: str) -> Any:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType[kind]


def reference_weights(gguf_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """gguf-py's float32 dequantization of every tensor, under mlx-lm's names and layout
    (Q/K rows un-permuted, Gemma norms minus 1): what the imported model should compute."""
    import mlx.core as mx
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from gateway.modelstore.gguf.reader import read_gguf

    model_type = config["model_type"]
    inverse: dict[str, str] = {}
    header = read_gguf(gguf_path, values=False)
    names = {t.name for t in header.tensors}
    out: dict[str, Any] = {}
    table = _GEMMA_BLOCK if model_type == "gemma3_text" else _LLAMA_BLOCK
    for module, short in table.items():
        inverse[short] = module
    for tensor in header.tensors:
        raw = np.asarray(header.raw(tensor))
        kind = tensor.type_name
        if kind == "BF16":
            values = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.asarray(dequantize(raw, GGMLQuantizationType[kind]), np.float32)
        values = values.reshape(tensor.shape)
        parts = tensor.name.split(".")
        if parts[0] == "blk":
            mlx_name = f"model.layers.{parts[1]}.{inverse[parts[2]]}.{parts[3]}"
        else:
            top = {v: k for k, v in _TOP.items()}[parts[0]]
            mlx_name = f"{top}.{parts[1]}"
        heads = _qk_heads(config, mlx_name)
        if heads is not None:
            values = unpermute(values, heads)
        if model_type == "gemma3_text" and tensor.name.endswith("norm.weight"):
            values = values - 1.0
        out[mlx_name] = mx.array(values)
    if "output.weight" not in names and "lm_head.weight" in out:
        del out["lm_head.weight"]
    return out

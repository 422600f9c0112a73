"""The GGUF importer, architecture by quant type: logits equal to a reference (real MLX).

Each case builds a small random-weight model with mlx-lm's own class (``build_synthetic``),
writes it as llama.cpp would (``write_gguf``), imports it and compares the logits of a fixed
prompt with a reference computed without the importer:
- float GGUFs: the synthetic folder itself, loaded by mlx-lm;
- quantized GGUFs: gguf-py's dequantization of the file's tensors, renamed and un-permuted by
  the writer's own tables and loaded into the same mlx-lm class in float32.
K-quant weights are random valid blocks, not the float model's (gguf-py cannot quantize K
types): the reference is still gguf-py's dequantization of those same bytes.

The weights cases use a 1,024-token slice of SmolLM2's vocabulary so that each runs in a
fraction of a second; the tokenizer cases use the whole vocabulary.
Set GGUF_TABLE=path to write the architecture x quant type table there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from gateway.bench.synthetic import SyntheticSpec, build_synthetic, default_tokenizer_folder
from gateway.bench.synthetic_gguf import reference_weights, write_gguf
from gateway.modelstore.gguf import convert_gguf

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma3", "qwen3_moe")
QUANT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
REPACKED = {"Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K"}
EXACT = 1e-4  # max |logit difference| where the weights moved over bit for bit
PROMPT = [[1, 504, 357, 282, 464, 314, 17, 216, 33, 2]]
_ROWS: list[dict[str, Any]] = []


def small_tokenizer(source: Path, out: Path, size: int = 1024) -> Path:
    """SmolLM2's tokenizer cut to its first ``size`` ids (merges kept where all three fit)."""
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


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Synthetic folders, built once per (architecture, dtype, size)."""
    root = tmp_path_factory.mktemp("gguf")
    tokenizer = small_tokenizer(default_tokenizer_folder(), root / "tokenizer")
    built: dict[tuple[str, str, bool], Path] = {}

    def get(architecture: str, dtype: str, k_quant: bool) -> Path:
        key = (architecture, dtype, k_quant)
        if key not in built:
            overrides: dict[str, Any] = {}
            sizes: dict[str, Any] = {}
            if architecture == "gemma3":
                # llama.cpp hard-codes these for Gemma 3 (the GGUF cannot say otherwise), and
                # mlx-lm needs at least one whole pattern of layers.
                overrides = {"sliding_window_pattern": 6, "query_pre_attn_scalar": 32}
                sizes["num_hidden_layers"] = 6
            if k_quant:  # K-quant rows are whole 256-value super-blocks
                sizes.update(hidden_size=256, intermediate_size=256, num_attention_heads=8)
                if architecture == "qwen3_moe":
                    overrides["moe_intermediate_size"] = 256
            spec = SyntheticSpec(architecture, dtype=dtype, overrides=overrides, **sizes)
            built[key] = build_synthetic(spec, root / "-".join(map(str, key)), tokenizer)
        return built[key]

    get.root = root  # type: ignore[attr-defined]
    return get


def _logits(model: Any) -> Any:
    import mlx.core as mx

    # On a CPU, MLX's gather_mm (MoE) takes float32 only: compare in float32 throughout.
    model.set_dtype(mx.float32)
    return model(mx.array(PROMPT)).astype(mx.float32)


@pytest.mark.parametrize("quant", QUANT_TYPES)
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_logits_match_the_reference(
    architecture: str, quant: str, models: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlx.core as mx
    from mlx_lm.utils import _get_classes, load_model

    dtype = {"F16": "float16", "BF16": "bfloat16"}.get(quant, "float32")
    folder = models(architecture, dtype, quant.endswith("_K"))
    work = models.root / f"{architecture}-{quant}"
    gguf = write_gguf(folder, work.with_suffix(".gguf"), quant)
    record = convert_gguf(gguf, work, lambda _msg: None)
    imported, _config = load_model(work)
    got = _logits(imported)

    config = json.loads((folder / "config.json").read_text())
    if quant in ("F32", "F16", "BF16"):
        reference, _ = load_model(folder)
    else:
        model_class, args_class = _get_classes(config)
        reference = model_class(args_class.from_dict(config))
        reference.load_weights(list(reference_weights(gguf, config).items()))
    want = _logits(reference)
    difference = mx.abs(got - want).max().item()
    outcome = record["types"][quant]
    _ROWS.append(
        {
            "architecture": architecture,
            "quant": quant,
            "difference": difference,
            "scale": mx.abs(want).max().item(),
            "outcome": outcome["outcome"],
            "max_abs_error": outcome.get("max_abs_error"),
            "bits": outcome["mlx_bits"],
        }
    )
    if quant == "Q6_K":
        # Two 16-value halves with their own scales share one MLX group: exact only where
        # both lie on one grid (half of the groups here), re-quantized to 8 bits elsewhere.
        assert outcome["outcome"] == "requantized" and outcome["mlx_bits"] == 8
        assert outcome["max_abs_error"] < 2e-3  # weights of about +-0.3: below 1 %
        assert difference < 0.05 * mx.abs(want).max().item()
    else:
        assert outcome["outcome"] == ("repacked exactly" if quant in REPACKED else "kept")
        assert difference <= EXACT


def test_import_record_and_folder(models: Any) -> None:
    """mlx_lm.load opens the folder (tokenizer and template included); the record counts."""
    from mlx_lm import load

    folder = models("qwen3_moe", "float32", True)
    work = models.root / "record"
    record = convert_gguf(write_gguf(folder, work.with_suffix(".gguf"), "Q4_K"), work, print)
    assert record["architecture"] == "qwen3moe" and record["model_type"] == "qwen3_moe"
    assert record["types"]["Q4_K"]["outcome"] == "repacked exactly"
    assert record["types"]["F32"]["outcome"] == "kept"  # norms and the router
    assert sum(t["tensors"] for t in record["types"].values()) == record["tensors"]
    config = json.loads((work / "config.json").read_text())
    assert config["num_experts"] == 8 and config["num_experts_per_tok"] == 2
    assert config["quantization"]["bits"] == 4
    loaded = load(str(work))
    tokenizer = loaded[1]
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user" in text


@pytest.fixture(scope="module", autouse=True)
def _table() -> Any:
    yield
    target = os.environ.get("GGUF_TABLE")
    if not target or not _ROWS:
        return
    lines = [
        "| architecture | quant type | loads | MLX form | max abs logit diff | logit scale "
        "| weight error (re-quantized) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in sorted(
        _ROWS, key=lambda r: (ARCHITECTURES.index(r["architecture"]), QUANT_TYPES.index(r["quant"]))
    ):
        form = row["outcome"] + (f", {row['bits']}-bit" if row["bits"] else "")
        error = f"{row['max_abs_error']:.2e}" if row["max_abs_error"] is not None else ""
        lines.append(
            f"| {row['architecture']} | {row['quant']} | yes | {form} | "
            f"{row['difference']:.2e} | {row['scale']:.1f} | {error} |"
        )
    Path(target).write_text("\n".join(lines) + "\n")

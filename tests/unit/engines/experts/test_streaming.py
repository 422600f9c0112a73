"""A streamed model computes what the fully resident one does, reading only routed experts."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from gateway.engines.experts.convert import bf16_to_f32, f16_all_finite, f16_to_f32
from gateway.engines.experts.plan import ExpertPlan, StreamedExperts
from gateway.engines.experts.safetensors_index import index_folder
from gateway.engines.experts.stats import CallbackListener, ExpertStats
from gateway.engines.experts.switch import StreamedSwitch
from gateway.engines.weights import WeightsMode, load_model
from testsupport.synthetic import build_synthetic

from .moe import moe_spec

PROMPT = "Mixture-of-experts layers route each token to a few experts. " * 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic(moe_spec(), tmp_path_factory.mktemp("moe"))


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = moe_spec(quantization={"group_size": 32, "bits": 4})
    return build_synthetic(spec, tmp_path_factory.mktemp("moe-4bit"))


def streamed(
    folder: Path, slots: int, mode: WeightsMode = "float32", policy: str = "lfu"
) -> tuple[object, object, ExpertStats]:
    events: list[tuple[str, int, float]] = []
    stats = ExpertStats(
        CallbackListener(
            lambda h, m: events.append(("lookup", h, m)), lambda b, s: events.append(("read", b, s))
        )
    )
    plan = ExpertPlan(4, 16, 4, slots, policy, 0, 0)  # type: ignore[arg-type]
    model, tokenizer, _ = load_model(folder, mode, StreamedExperts(plan, stats))
    assert events == [] or all(e[0] in ("lookup", "read") for e in events)
    return model, tokenizer, stats


def banks(model: object) -> list[StreamedSwitch]:
    return [m for _, m in model.named_modules() if isinstance(m, StreamedSwitch)]  # type: ignore[attr-defined]


def logits(model: object, tokens: list[int]) -> mx.array:
    out = model(mx.array([tokens]))  # type: ignore[operator]
    mx.eval(out)
    return out


def test_the_stacked_experts_are_never_read(folder: Path) -> None:
    model, _, stats = streamed(folder, slots=4)
    switches = banks(model)
    assert len(switches) == 4
    for switch in switches:
        assert switch.bank.resident() == []
        weight = switch.inner.gate_proj.weight
        assert weight.shape == (4, 32, 64) and weight.dtype == mx.float32
    assert stats.bytes_read == 0  # loading read no expert


@pytest.mark.parametrize("slots", [16, 6, 1])
def test_logits_equal_the_resident_model(folder: Path, slots: int) -> None:
    resident, tokenizer, _ = load_model(folder, "float32")
    model, _, stats = streamed(folder, slots=slots)
    tokens = tokenizer.encode(PROMPT)
    assert len(tokens) * 4 > 64  # enough pairs that mlx-lm sorts them by expert
    assert mx.abs(logits(resident, tokens) - logits(model, tokens)).max().item() == 0.0
    for token in tokens[:6]:  # one token at a time, as decoding does
        assert mx.abs(logits(resident, [token]) - logits(model, [token])).max().item() == 0.0
    assert stats.misses > 0


def test_a_prompt_routed_to_more_experts_than_slots_runs_in_waves(folder: Path) -> None:
    model, tokenizer, stats = streamed(folder, slots=5)
    tokens = tokenizer.encode(PROMPT)
    logits(model, tokens)
    # Each layer saw more unique experts than its 5 slots: more lookups than one per expert.
    per_layer = (stats.hits + stats.misses) / 4
    assert per_layer > 5
    for switch in banks(model):
        assert len(switch.bank.resident()) == 5


def test_a_repeated_step_hits_every_expert(folder: Path) -> None:
    model, tokenizer, stats = streamed(folder, slots=8)
    token = tokenizer.encode("hello")[:1]
    logits(model, token)
    first = (stats.hits, stats.misses, stats.bytes_read)
    assert first[1] == 4 * 4  # top-4 in each of 4 layers, all missed
    logits(model, token)
    assert stats.misses == first[1] and stats.bytes_read == first[2]
    assert stats.hits == first[0] + 16
    assert stats.as_dict()["hit_ratio"] == 0.5


@pytest.mark.parametrize("mode", ["float32", "quantized"])
def test_quantized_models_stream_in_both_forms(quantized: Path, mode: WeightsMode) -> None:
    resident, tokenizer, _ = load_model(quantized, mode)
    model, _, _ = streamed(quantized, slots=5, mode=mode)
    switch = banks(model)[0]
    kind = type(switch.inner.gate_proj).__name__
    assert kind == ("SwitchLinear" if mode == "float32" else "QuantizedSwitchLinear")
    tokens = tokenizer.encode(PROMPT)
    difference = mx.abs(logits(resident, tokens) - logits(model, tokens)).max().item()
    assert difference == 0.0
    for token in tokens[:3]:
        assert mx.abs(logits(resident, [token]) - logits(model, [token])).max().item() == 0.0


def test_each_expert_is_read_from_its_own_byte_range(folder: Path) -> None:
    index = index_folder(folder)
    location = index["model.layers.1.mlp.switch_mlp.down_proj.weight"]
    assert location.shape == (16, 64, 32) and location.dtype == "F16"
    stacked = mx.load(str(location.file))["model.layers.1.mlp.switch_mlp.down_proj.weight"]
    with location.file.open("rb") as handle:
        handle.seek(location.row_offset(5))
        raw = np.frombuffer(handle.read(location.row_bytes()), dtype=np.float16)
    assert np.array_equal(raw.reshape(64, 32), np.array(stacked[5]))


def test_float16_conversion_is_exact() -> None:
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    finite = every[(every & 0x7C00) != 0x7C00]
    expected = finite.view(np.float16).astype(np.float32)
    assert np.array_equal(f16_to_f32(finite).view(np.uint32), expected.view(np.uint32))
    assert f16_all_finite(finite)
    out = np.full(finite.size, np.nan, dtype=np.float32)  # written in place, as a slot is
    assert f16_to_f32(finite, out, finite=True) is out
    assert np.array_equal(out.view(np.uint32), expected.view(np.uint32))
    special = np.array([0x7C00, 0xFC00, 0x7E00, 0x3C00], dtype=np.uint16)  # inf, -inf, nan, 1
    assert not f16_all_finite(special)
    converted = f16_to_f32(special)
    assert np.isinf(converted[:2]).all() and np.isnan(converted[2]) and converted[3] == 1.0


def test_bfloat16_conversion_is_exact() -> None:
    values = np.array([1.0, -2.5, 3.140625, 2.0**-130, -0.0], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat16
    assert np.array_equal(bf16_to_f32(bits).view(np.uint32), values.view(np.uint32))

"""How a model's weights are held in memory on this compute path, chosen per model.

On Apple Silicon the model's own form is the fast one (Metal, 4-bit kernels): nothing
changes. On a Linux CPU two forms are worth having (``shared/MODELS.md`` §3, §7):

* ``float32``: every quantized layer dequantized and everything cast to float32, so OpenBLAS
  does the matrix products: the fastest, but 8x the 4-bit size (a 7B model ~28 GB);
* ``quantized``: the packed weights kept, scales, biases and every other float cast to
  float32, so activations are float32 (MLX's CPU float16 matmul bypasses BLAS and its
  float16 quantized kernels are ~35x slower): a little slower, 1/4-1/8 of the memory.

``auto`` dequantizes a model when its float32 copy takes at most half of the memory budget
(the other half is room for KV caches and another tier), and keeps it quantized otherwise.
A model stored unquantized (float16/bfloat16) is cast to float32 when that fits, and kept as
stored otherwise (slow on a CPU; the choice's reason says so).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from gateway.engines.device import ComputePath
from gateway.engines.experts.plan import (
    DEFAULT_SLOT_SHARE,
    ExpertPlan,
    ExpertStreaming,
    StreamedExperts,
    expert_layout,
)
from gateway.engines.footprint import ModelBytes

WeightsMode = Literal["native", "float32", "quantized"]
WeightsPreference = Literal["auto", "4bit", "float32"]
# The share of memory_budget_bytes a dequantized copy may take under "auto".
DEQUANTIZE_SHARE = 0.5


@dataclass(frozen=True)
class WeightsChoice:
    mode: WeightsMode
    bytes: int  # what the weights will take in memory in this form
    reason: str
    # Experts streamed from disk (gateway.engines.experts): ``bytes`` counts their slots only.
    experts: ExpertPlan | None = None

    def as_dict(self) -> dict[str, Any]:
        described: dict[str, Any] = {"mode": self.mode, "bytes": self.bytes, "reason": self.reason}
        if self.experts is not None:
            described["experts"] = self.experts.as_dict()
        return described


def choose_weights(
    compute: ComputePath,
    model: ModelBytes,
    budget_bytes: int,
    preference: WeightsPreference = "auto",
) -> WeightsChoice:
    """The form of one model's weights on ``compute`` (``preference`` from the settings)."""
    if compute.device != "cpu":
        return WeightsChoice("native", model.stored, f"{compute.device}: the model's own form")
    if preference == "auto":
        preference = "float32" if compute.dequantize else "4bit"
        fits = model.float32 <= DEQUANTIZE_SHARE * budget_bytes
        if preference == "float32" and not fits:
            share = f"{DEQUANTIZE_SHARE:.0%} of memory_budget_bytes"
            if model.is_quantized:
                return WeightsChoice(
                    "quantized",
                    model.quantized,
                    f"float32 copy ({_gib(model.float32)}) exceeds {share}: "
                    "quantized weights, float32 activations",
                )
            return WeightsChoice(
                "native",
                model.stored,
                f"float32 copy ({_gib(model.float32)}) exceeds {share}: kept as stored "
                "(slow on a CPU: a quantized copy of this model would be faster)",
            )
    if preference == "float32":
        return WeightsChoice("float32", model.float32, "dequantized to float32 (OpenBLAS)")
    if model.is_quantized:
        return WeightsChoice("quantized", model.quantized, "quantized, float32 activations")
    return WeightsChoice("float32", model.float32, "unquantized model: float32 activations")


def plan_streamed(
    compute: ComputePath,
    folder: Path,
    budget_bytes: int,
    preference: WeightsPreference,
    streaming: ExpertStreaming,
) -> WeightsChoice:
    """The weights choice of a streamed tier: resident part plus slots, in one form."""
    layout = expert_layout(folder)
    per = layout.per_expert

    def slots_for(expert_bytes: int) -> int:
        if streaming.cache_bytes is not None:
            return min(layout.experts, streaming.cache_bytes // (layout.layers * expert_bytes))
        if streaming.slots is not None:
            return min(layout.experts, streaming.slots)
        share = math.ceil(layout.experts * DEFAULT_SLOT_SHARE)
        return min(layout.experts, max(2 * layout.top_k, share))

    slots = {
        "stored": slots_for(per.stored),
        "float32": slots_for(per.float32),
        "quantized": slots_for(per.quantized),
    }
    if min(slots.values()) < 1:
        raise ValueError(
            f"expert_cache_bytes ({streaming.cache_bytes}) holds less than one expert per "
            f"layer ({layout.layers} layers of {per.float32} bytes per expert in float32)"
        )
    total = ModelBytes(
        layout.rest.stored + layout.layers * slots["stored"] * per.stored,
        layout.rest.float32 + layout.layers * slots["float32"] * per.float32,
        layout.rest.quantized + layout.layers * slots["quantized"] * per.quantized,
        layout.rest.is_quantized or per.is_quantized,
    )
    choice = choose_weights(compute, total, budget_bytes, preference)
    form = {"native": "stored"}.get(choice.mode, choice.mode)
    expert_bytes = {"stored": per.stored, "float32": per.float32, "quantized": per.quantized}
    rest_bytes = {
        "stored": layout.rest.stored,
        "float32": layout.rest.float32,
        "quantized": layout.rest.quantized,
    }
    plan = ExpertPlan(
        layers=layout.layers,
        experts=layout.experts,
        top_k=layout.top_k,
        slots=slots[form],
        policy=streaming.policy,
        expert_bytes=expert_bytes[form],
        resident_bytes=rest_bytes[form],
    )
    reason = (
        f"{choice.reason}; experts streamed from disk: {plan.slots} of {plan.experts} slots "
        f"in each of {plan.layers} layers ({plan.policy.upper()})"
    )
    return WeightsChoice(choice.mode, choice.bytes, reason, experts=plan)


def default_mode(compute: ComputePath) -> WeightsMode:
    """The form a model takes on ``compute`` when no per-model choice was made."""
    if compute.device != "cpu":
        return "native"
    return "float32" if compute.dequantize else "quantized"


def load_model(
    folder: Path, mode: WeightsMode, experts: StreamedExperts | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    """The one way a model folder is loaded: mlx-lm's ``load`` (lazy, so a dequantized copy
    is made without first materializing the stored one), then its weights put in ``mode``
    and evaluated. With ``experts``, the MoE layers are swapped for streamed ones while
    still unevaluated, so the stacked experts are never read. Returns the model, its
    tokenizer and its config."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load

    model, tokenizer, config = cast(
        tuple[Any, Any, dict[str, Any]], load(str(folder), return_config=True, lazy=True)
    )
    if experts is not None:
        from gateway.engines.experts.switch import install

        install(model, folder, experts.plan, mode, experts.stats)
    apply_weights(model, mode, evaluate=experts is None)
    if experts is not None:
        # One tensor at a time: each stored (float16) copy is freed before the next is read,
        # instead of all of them living at once: a streamed tier's peak is its load (1.27 →
        # 1.12 GiB for MODELS.md §6's model with 7 slots).
        for _, parameter in cast(list[tuple[str, Any]], tree_flatten(model.parameters())):
            mx.eval(parameter)
        mx.clear_cache()  # the freed copies, kept by MLX for reuse otherwise
    mx.eval(model.parameters())
    return model, tokenizer, config


def apply_weights(model: Any, mode: WeightsMode, evaluate: bool = True) -> None:
    """Put a freshly loaded (lazy) mlx-lm model into ``mode`` (evaluated unless not to)."""
    if mode == "native":
        return
    import mlx.core as mx
    from mlx_lm.utils import dequantize_model

    if mode == "float32":
        # Dequantized weights come out float16 (GGUF scales are float16), and MLX's CPU
        # float16 matmul bypasses BLAS: float32 is what makes OpenBLAS do the work.
        dequantize_model(model)
    else:
        _dequantize_for_prefill(model)
    # set_dtype casts floating parameters only: packed uint32 weights stay as they are.
    model.set_dtype(mx.float32)
    if evaluate:
        mx.eval(model.parameters())


# Above this many tokens in one pass, a quantized layer's weight is dequantized for the pass.
PREFILL_DEQUANTIZE_MIN_TOKENS = 8


def _dequantize_for_prefill(model: Any) -> None:
    """Quantized layers that compute a multi-token pass with OpenBLAS.

    MLX's CPU kernel for a quantized matrix product handles one row at a time: a 64-token
    prefill of a 1B model took as long as 64 decode steps (measured here: 70 s vs 12 s with
    this). For a pass over more than ``PREFILL_DEQUANTIZE_MIN_TOKENS`` tokens each layer's
    weight is dequantized to float32 for the pass and multiplied by sgemm; the float32 copy
    lives only while its product is computed (one layer's worth of memory at a time).
    Decode steps keep the quantized kernel, which reads 1/8 of the bytes.
    """
    import mlx.nn as nn

    linear, embedding = _prefill_classes()
    for _, module in model.named_modules():
        if type(module) is nn.QuantizedLinear:
            module.__class__ = linear
        elif type(module) is nn.QuantizedEmbedding:
            module.__class__ = embedding


def _dequantized(module: Any) -> Any:
    import mlx.core as mx

    return mx.dequantize(
        module["weight"],
        module["scales"],
        module.get("biases"),
        group_size=module.group_size,
        bits=module.bits,
        mode=module.mode,
    )


def _many_tokens(x: Any) -> bool:
    return bool(x.ndim >= 2 and x.shape[-2] > PREFILL_DEQUANTIZE_MIN_TOKENS)


@functools.cache
def _prefill_classes() -> tuple[type, type]:
    """Made on first use: importing MLX must wait until the compute path is chosen."""
    import mlx.nn as nn

    class PrefillDequantizingLinear(nn.QuantizedLinear):  # type: ignore[misc]
        def __call__(self, x: Any) -> Any:
            if not _many_tokens(x):
                return super().__call__(x)
            y = x @ _dequantized(self).T
            return y + self["bias"] if "bias" in self else y

    class PrefillDequantizingEmbedding(nn.QuantizedEmbedding):  # type: ignore[misc]
        # Tied embeddings: the output projection over every position of a chunk.
        def as_linear(self, x: Any) -> Any:
            if not _many_tokens(x):
                return super().as_linear(x)
            return x @ _dequantized(self).T

    return PrefillDequantizingLinear, PrefillDequantizingEmbedding


def _gib(count: int) -> str:
    return f"{count / 2**30:.1f} GiB"

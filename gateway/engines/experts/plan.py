"""How a streamed tier is planned at start: its layout, its slots, the memory it will hold.

Planning reads headers only (no MLX): which tensors are stacked experts, how many MoE
layers and experts there are, and the bytes of one expert in each form. The memory a
streamed tier holds is its resident part plus C slots per MoE layer, and the form of its
weights (``choose_weights``) is chosen on that total, not on the whole model: a model
several times the budget can still be served dequantized when its slots fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.engines.experts.policy import PolicyName
from gateway.engines.experts.stats import ExpertStats
from gateway.engines.footprint import ModelBytes, bytes_of, tensor_shapes

_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# mlx-lm's names for the stacked expert modules (SwitchGLU/SwitchMLP attributes).
_EXPERT_MARKERS = (".switch_mlp.", ".experts.")
# With neither expert_slots nor expert_cache_bytes: an eighth of the experts, at least two
# steps' worth of a token's experts.
DEFAULT_SLOT_SHARE = 0.125


@dataclass(frozen=True)
class ExpertStreaming:
    """A tier's settings: ``slots`` per MoE layer, or ``cache_bytes`` for all of them."""

    slots: int | None = None
    cache_bytes: int | None = None
    policy: PolicyName = "lfu"


@dataclass(frozen=True)
class ExpertLayout:
    """The experts of a model folder, from its headers."""

    layers: int  # MoE layers
    experts: int  # experts per layer
    top_k: int  # experts a token is routed to
    per_expert: ModelBytes  # one expert of one layer (all its projections)
    rest: ModelBytes  # everything that stays resident


@dataclass(frozen=True)
class ExpertPlan:
    """What a streamed tier will hold: ``slots`` of ``experts`` in each of ``layers``."""

    layers: int
    experts: int
    top_k: int
    slots: int
    policy: PolicyName
    expert_bytes: int  # one expert in the chosen form
    resident_bytes: int  # everything but the experts, in the chosen form

    @property
    def slot_bytes(self) -> int:
        return self.layers * self.slots * self.expert_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": "stream",
            "slots": self.slots,
            "experts": self.experts,
            "layers": self.layers,
            "policy": self.policy,
            "slot_bytes": self.slot_bytes,
            "resident_bytes": self.resident_bytes,
        }


@dataclass(frozen=True)
class StreamedExperts:
    """What the loader needs: the plan, and where to count hits, misses and reads."""

    plan: ExpertPlan
    stats: ExpertStats


def expert_layout(folder: Path) -> ExpertLayout:
    """The experts of ``folder``; ValueError for a model that has none to stream."""
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or {}
    count = int(next((c[k] for c in (config, text) for k in _EXPERT_COUNT_KEYS if c.get(k)), 0))
    top_k = int(config.get("num_experts_per_tok") or text.get("num_experts_per_tok") or 1)
    shapes = tensor_shapes(folder)
    expert_names = {
        name
        for name, (_, shape) in shapes.items()
        if count
        and len(shape) >= 2
        and shape[0] == count
        and any(m in name for m in _EXPERT_MARKERS)
    }
    if not expert_names:
        raise ValueError(
            f"{folder.name} is not a mixture-of-experts model with stacked experts "
            f"(model_type {config.get('model_type')!r}): experts = 'stream' needs one"
        )
    layers = {name.split(".switch_mlp.")[0].split(".experts.")[0] for name in expert_names}
    quantization = config.get("quantization") or config.get("quantization_config") or {}
    experts = bytes_of(shapes, quantization, expert_names)
    rest = bytes_of(shapes, quantization, set(shapes) - expert_names)
    per = len(layers) * count
    per_expert = ModelBytes(
        experts.stored // per,
        experts.float32 // per,
        experts.quantized // per,
        experts.is_quantized,
    )
    return ExpertLayout(len(layers), count, top_k, per_expert, rest)

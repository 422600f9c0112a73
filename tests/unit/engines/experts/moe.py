"""The small synthetic qwen3_moe the expert-streaming tests share (built in ~1 s)."""

from __future__ import annotations

from typing import Any

from testsupport.synthetic import SyntheticSpec


def moe_spec(**changes: Any) -> SyntheticSpec:
    """4 layers, 16 experts, top-4, float16 on disk (as released models are)."""
    fields: dict[str, Any] = {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "dtype": "float16",
        "overrides": {"num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 32},
    }
    fields.update(changes)
    return SyntheticSpec("qwen3_moe", **fields)

"""Every benchmark ``gateway bench`` lists can be run: its module imports and has ``main``
(``typing`` once pointed at a module renamed to ``hints``)."""

from __future__ import annotations

import importlib

import pytest

from bench import BENCHMARKS, benchmark_module


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_listed_benchmark_has_a_module_with_main(name: str) -> None:
    module = importlib.import_module(benchmark_module(name))
    assert callable(module.main)


def test_a_ceiling_variant_changes_nested_settings_and_fills_in_the_implicit_tier() -> None:
    from bench.ceiling import IMPLICIT_TIER, variant_config
    from gateway.config import Settings

    base = {"scheduler": {"token_flush_seconds": 0.01}}
    name, changed = variant_config(
        base, "eager:tiers.default.decode_step=eager,scheduler.token_flush_seconds=0"
    )
    assert name == "eager"
    assert changed == {
        "scheduler": {"token_flush_seconds": 0},
        "tiers": {"default": {**IMPLICIT_TIER, "decode_step": "eager"}},
    }
    assert base == {"scheduler": {"token_flush_seconds": 0.01}}  # the base is not changed
    settings = Settings.model_validate(changed)
    assert settings.tiers["default"].decode_step == "eager"

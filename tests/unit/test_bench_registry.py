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

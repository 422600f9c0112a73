"""The local-model kit: what the gateway needs only when it runs models itself.

A local (MLX) tier needs three things the rest of the gateway never sees: a way to build a
model runner, a plan for the form of its weights (which needs the model on disk), and a
probe of the memory MLX holds. The real kit (``MLXModelKit``) finds each model in the model
store and loads it with the MLX runner; tests give the gateway a runner factory instead
(``GivenRunnerKit``), which plans nothing and measures nothing. The wiring asks the kit and
never checks which one it has.
"""

from __future__ import annotations

import logging
from typing import Protocol

from gateway.config import ConfigError, Settings, TierSettings
from gateway.engines.device import ComputePath
from gateway.engines.experts.plan import ExpertStreaming, StreamedExperts
from gateway.engines.footprint import model_bytes
from gateway.engines.runner import ModelRunner
from gateway.engines.weights import WeightsChoice, WeightsMode, choose_weights, plan_streamed
from gateway.modelstore.sources import ResolvedModel, parse_model_ref, resolve
from gateway.modelstore.store import ModelStore
from gateway.scheduler.pacing import Pacing

log = logging.getLogger("gateway")


class RunnerFactory(Protocol):
    """Builds a model runner on the inference thread (tests pass a fake one): (model id,
    compute path, the form of its weights) -> a loaded runner. Only a tier that streams its
    experts passes ``experts`` (gateway.engines.experts): a test's factory may leave it out."""

    def __call__(
        self,
        model_id: str,
        compute: ComputePath,
        weights: WeightsMode,
        /,
        experts: StreamedExperts | None = None,
    ) -> ModelRunner: ...


class LocalModelKit(Protocol):
    """What the wiring asks of a local model, whoever provides it."""

    def build_runner(
        self,
        model_id: str,
        compute: ComputePath,
        weights: WeightsMode,
        /,
        experts: StreamedExperts | None = None,
        pacing: Pacing | None = None,
    ) -> ModelRunner:
        """A loaded runner (a ``RunnerFactory``); called on the inference thread. ``pacing``:
        what its passes ask between them (the scheduler)."""
        ...

    def memory(self) -> dict[str, int]:
        """Bytes in use (``active``) and the highest since the last reset (``peak``)."""
        ...

    def plan_weights(
        self, compute: ComputePath, tier: str, settings: TierSettings
    ) -> WeightsChoice | None:
        """The form of a tier's weights and the bytes they will hold, or None to load the
        model as it is. Runs on the inference thread (it may import the model first)."""
        ...


def resolve_model(settings: Settings, model_id: str) -> ResolvedModel:
    """The folder to load for a tier's model reference (``gateway.modelstore.sources``)."""
    store = ModelStore(settings.cache_dir)
    return resolve(parse_model_ref(model_id), store, progress=lambda msg: log.info("%s", msg))


class MLXModelKit:
    """Models found in the model store (imported the first time only), loaded with MLX."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def build_runner(
        self,
        model_id: str,
        compute: ComputePath,
        weights: WeightsMode,
        /,
        experts: StreamedExperts | None = None,
        pacing: Pacing | None = None,
    ) -> ModelRunner:
        from gateway.engines.mlx_runner import MLXRunner

        model = resolve_model(self.settings, model_id)
        return MLXRunner(
            model_id, model.folder, compute, model.default_stop, weights, experts, pacing
        )

    def memory(self) -> dict[str, int]:
        from gateway.engines.mlx_runner import mlx_memory

        return mlx_memory()

    def plan_weights(
        self, compute: ComputePath, tier: str, settings: TierSettings
    ) -> WeightsChoice | None:
        folder = resolve_model(self.settings, settings.model).folder
        preference = settings.weights or self.settings.weights
        budget = self.settings.memory_budget_bytes
        if settings.experts == "stream":
            streaming = ExpertStreaming(
                settings.expert_slots, settings.expert_cache_bytes, settings.expert_policy
            )
            try:
                return plan_streamed(compute, folder, budget, preference, streaming)
            except ValueError as exc:
                raise ConfigError(f"tier {tier!r}: {exc}") from exc
        return choose_weights(compute, model_bytes(folder), budget, preference)


class GivenRunnerKit:
    """A runner factory given from outside (tests): weights loaded as they are, no memory
    measured."""

    def __init__(self, factory: RunnerFactory) -> None:
        self.factory = factory

    def build_runner(
        self,
        model_id: str,
        compute: ComputePath,
        weights: WeightsMode,
        /,
        experts: StreamedExperts | None = None,
        pacing: Pacing | None = None,
    ) -> ModelRunner:
        # A test's runner is a fake: it computes no passes to pace.
        if experts is None:  # a test's factory may not take them
            return self.factory(model_id, compute, weights)
        return self.factory(model_id, compute, weights, experts=experts)

    def memory(self) -> dict[str, int]:
        return {"active": 0, "peak": 0}

    def plan_weights(
        self, compute: ComputePath, tier: str, settings: TierSettings
    ) -> WeightsChoice | None:
        return None

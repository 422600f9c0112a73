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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from gateway.config import ConfigError, Settings, TierSettings
from gateway.engines.device import ComputePath
from gateway.engines.experts.plan import ExpertStreaming, StreamedExperts
from gateway.engines.footprint import model_bytes
from gateway.engines.runner import ModelRunner
from gateway.engines.same_tokenizer import tokenizer_mismatch
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
        drafting: Drafting | None = None,
        batching: Batching | None = None,
        decoding: Decoding | None = None,
    ) -> ModelRunner:
        """A loaded runner (a ``RunnerFactory``); called on the inference thread. ``pacing``:
        what its passes ask between them (the scheduler); ``drafting``: the tier's
        speculative decoding; ``batching``: how many of its generations decode together."""
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


@dataclass(frozen=True)
class Drafting:
    """A tier's speculative decoding (``TierSettings.speculation``, ``draft_model``)."""

    speculation: str = "lookup"
    draft_model: str | None = None


@dataclass(frozen=True)
class Batching:
    """A tier's batched decode (``TierSettings.max_sequences``) and the bytes left for its
    sequences' KV caches (None: not known, the setting alone bounds it)."""

    max_sequences: int = 1
    cache_budget_bytes: int | None = None


@dataclass(frozen=True)
class Decoding:
    """How a tier's decode steps run (``TierSettings.decode_step``): compiled or eager."""

    step: str = "compiled"


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
        drafting: Drafting | None = None,
        batching: Batching | None = None,
        decoding: Decoding | None = None,
    ) -> ModelRunner:
        from gateway.engines.mlx_runner import MLXRunner

        model = resolve_model(self.settings, model_id)
        drafting = drafting or Drafting()
        batching = batching or Batching()
        draft = drafting.draft_model
        return MLXRunner(
            model_id,
            model.folder,
            compute,
            model.default_stop,
            weights,
            experts,
            pacing,
            speculation=drafting.speculation,
            draft_folder=resolve_model(self.settings, draft).folder if draft else None,
            max_batch=batching.max_sequences,
            cache_budget_bytes=batching.cache_budget_bytes,
            decode_step=(decoding or Decoding()).step,
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
                choice = plan_streamed(compute, folder, budget, preference, streaming)
            except ValueError as exc:
                raise ConfigError(f"tier {tier!r}: {exc}") from exc
        else:
            choice = choose_weights(compute, model_bytes(folder), budget, preference)
        if settings.draft_model is None:
            return choice
        return self._with_draft(choice, folder, tier, settings)

    def _with_draft(
        self, choice: WeightsChoice, folder: Path, tier: str, settings: TierSettings
    ) -> WeightsChoice:
        """The tier's weights with its draft model's: held in the same form, counted in the
        tier's memory. A draft that does not share the tokenizer is refused here, at start."""
        assert settings.draft_model is not None
        draft = resolve_model(self.settings, settings.draft_model).folder
        mismatch = tokenizer_mismatch(folder, draft)
        if mismatch:
            raise ConfigError(
                f"tier {tier!r}: draft_model {settings.draft_model!r} does not share the "
                f"tokenizer of model {settings.model!r}: {mismatch}"
            )
        held = model_bytes(draft)
        draft_bytes = {"float32": held.float32, "quantized": held.quantized}.get(
            choice.mode, held.stored
        )
        return replace(choice, bytes=choice.bytes + draft_bytes)


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
        drafting: Drafting | None = None,
        batching: Batching | None = None,
        decoding: Decoding | None = None,
    ) -> ModelRunner:
        # A test's runner is a fake: it computes no passes to pace, drafts nothing and
        # decodes alone.
        if experts is None:  # a test's factory may not take them
            return self.factory(model_id, compute, weights)
        return self.factory(model_id, compute, weights, experts=experts)

    def memory(self) -> dict[str, int]:
        return {"active": 0, "peak": 0}

    def plan_weights(
        self, compute: ComputePath, tier: str, settings: TierSettings
    ) -> WeightsChoice | None:
        return None

"""Each configured tier as a backend: a local model (engine, scheduler, prefix caches), an
OpenAI-compatible upstream server, or a cluster of MLX's distributed engine (``clusters``);
then the registry that names them."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.config import Settings, TierSettings
from gateway.engines.device import ComputePath
from gateway.engines.experts.plan import StreamedExperts
from gateway.engines.experts.stats import CallbackListener, ExpertStats
from gateway.engines.local import LocalBackend
from gateway.engines.prefix_disk import DiskPrefixes
from gateway.engines.prefix_store import PrefixCacheStore
from gateway.engines.residency import LocalModels, Resident
from gateway.engines.upstream import OpenAIUpstreamBackend, UpstreamConfig, is_loopback_url
from gateway.engines.weights import WeightsChoice
from gateway.metrics import ExpertMetrics, GatewayMetrics
from gateway.modelstore.store import KNOWN_MODELS
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import Backend
from gateway.serving.tiers import Tier, TierRegistry
from gateway.wiring.clusters import distributed_backend
from gateway.wiring.kit import Batching, Decoding, Drafting, LocalModelKit


def prefix_disk_folder(settings: Settings) -> Path:
    """Where prefix KV caches are saved between runs (``gateway cache`` reads it too)."""
    return settings.cache.persist_folder or settings.cache_dir / "prefix-cache"


async def plan_local_weights(
    settings: Settings, kit: LocalModelKit, compute: ComputePath, scheduler: Scheduler
) -> dict[str, WeightsChoice]:
    """Per local tier, the form its weights will take (importing a model uses MLX: on the
    inference thread); a kit that plans nothing leaves a tier out."""
    weights: dict[str, WeightsChoice] = {}
    for name, tier in settings.tiers.items():
        if tier.kind != "mlx":
            continue
        plan = functools.partial(kit.plan_weights, compute, name, tier)
        choice = await scheduler.run_on_engine_thread(plan)
        if choice is not None:
            weights[name] = choice
    return weights


@dataclass
class TierBackends:
    """Builds one backend per tier; local ones share the scheduler, memory and caches."""

    settings: Settings
    kit: LocalModelKit
    compute: ComputePath
    metrics: GatewayMetrics
    scheduler: Scheduler
    local_models: LocalModels
    # Per local tier: the form its weights will take and the bytes they will hold.
    weights: Mapping[str, WeightsChoice]

    def __post_init__(self) -> None:
        cache = self.settings.cache
        self.prefix_store = PrefixCacheStore(cache.prefix_cache_bytes, self.metrics.prefix_cache)
        self.disk = DiskPrefixes(prefix_disk_folder(self.settings), cache.persist_prefix_bytes)

    def backend(self, name: str, tier: TierSettings) -> Backend:
        if tier.kind == "openai":
            return self.upstream(name, tier)
        if tier.kind == "mlx-distributed":
            return distributed_backend(name, tier, self.settings, self.metrics, self.scheduler)
        weights = self.weights.get(name)
        load = functools.partial(
            self.kit.build_runner,
            tier.model,
            self.compute,
            weights.mode if weights else "native",
            pacing=self.scheduler,  # its passes ask the slot who may arrive
            drafting=Drafting(tier.speculation, tier.draft_model),
            decoding=Decoding(tier.decode_step),
            # The memory a tier's sequences may fill: the budget less its weights.
            batching=Batching(
                tier.max_sequences,
                self.settings.memory_budget_bytes - weights.bytes if weights else None,
            ),
        )
        expert_stats = None
        if weights is not None and weights.experts is not None:
            expert_stats = ExpertStats(expert_listener(self.metrics.experts, name))
            load = functools.partial(load, experts=StreamedExperts(weights.experts, expert_stats))
        resident = self.local_models.register(
            Resident(
                tier=name,
                model_id=tier.model,
                load=load,
                estimated_bytes=weights.bytes if weights else 0,
                keep_alive_seconds=tier.keep_alive_seconds,
                weights=weights,
                expert_stats=expert_stats,
                speculation=f"draft_model {tier.draft_model}"
                if tier.draft_model
                else tier.speculation,
            )
        )
        return LocalBackend(
            name, resident, self.local_models, self.scheduler, self.prefix_store, self.disk
        )

    def upstream(self, name: str, tier: TierSettings) -> Backend:
        assert tier.base_url is not None
        same_machine = (
            is_loopback_url(tier.base_url) if tier.same_machine is None else tier.same_machine
        )
        config = UpstreamConfig(
            base_url=tier.base_url,
            model=tier.model,
            api_key=tier.api_key,
            same_machine=same_machine,
            connect_timeout=tier.connect_timeout_seconds,
            read_timeout=tier.read_timeout_seconds,
            context_length=tier.context_length,
        )
        return OpenAIUpstreamBackend(name, config, self.metrics.upstream, self.scheduler)


def make_tier(name: str, backend: Backend, settings: TierSettings) -> Tier:
    known = KNOWN_MODELS.get(settings.model)
    description, base_model = (known.description, known.base_model) if known else ("", False)
    return Tier(
        name,
        backend,
        int(time.time()),
        description,
        base_model,
        settings.temperature,
        settings.repetition_penalty,
    )


async def preload(settings: Settings, local_models: LocalModels) -> None:
    """Load the tiers marked ``preload`` now rather than at their first request."""
    for resident in local_models.residents:
        if settings.tiers[resident.tier].preload:
            await local_models.acquire(resident)
            local_models.release(resident)


def make_registry(settings: Settings, tiers: Mapping[str, Tier]) -> TierRegistry:
    assert settings.default_tier is not None
    return TierRegistry(tiers, settings.aliases, settings.default_tier)


def expert_listener(metrics: ExpertMetrics, tier: str) -> CallbackListener:
    """A streamed tier's expert counts, into the metric families."""
    hits = metrics.expert_cache_hits.labels(tier)
    misses = metrics.expert_cache_misses.labels(tier)
    read_bytes = metrics.expert_bytes_read.labels(tier)
    read_seconds = metrics.expert_read_seconds.labels(tier)

    def lookups(hit_count: int, miss_count: int) -> None:
        hits.inc(hit_count)
        misses.inc(miss_count)

    def read(nbytes: int, seconds: float) -> None:
        read_bytes.inc(nbytes)
        read_seconds.observe(seconds)

    return CallbackListener(lookups, read)

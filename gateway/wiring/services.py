"""Every service of the gateway, opened in order and closed in reverse (vLLM's
``init_app_state``): the response store, the scheduler, local-model residency, one backend
per tier, the serving layer (chat, hints, tasks, Responses, embeddings) and the peers.

``open_services`` is an async context manager: what it opened is closed when it exits,
also when a later step fails to open. Closing order: peers, backends (prefix caches saved
first), residency (models unloaded), the scheduler, the response store.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import gateway
from gateway.config import Settings
from gateway.engines.device import ComputePath, choose_compute_path
from gateway.engines.local import LocalBackend
from gateway.engines.residency import LocalModels
from gateway.errors import ShuttingDownError
from gateway.metrics import GatewayMetrics
from gateway.peers.discovery import start_discovery
from gateway.peers.dispatch import Dispatcher, dispatch_to_peers
from gateway.peers.inbox import PeerInbox
from gateway.peers.nodes import Peers
from gateway.peers.signing import RequestVerifier
from gateway.routes.draining import Lifecycle
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.seam.backend import Backend, Priority
from gateway.serving.anthropic import AnthropicMessages
from gateway.serving.chat import ChatService
from gateway.serving.completions import CompletionsService
from gateway.serving.embeddings import EmbeddingsService
from gateway.serving.hints import HintService
from gateway.serving.openai_chat import OpenAIChat
from gateway.serving.response_store import ResponseStore
from gateway.serving.responses import ResponseHistory, ResponsesService
from gateway.serving.speculation import Speculator
from gateway.serving.tasks import TaskService
from gateway.serving.tiers import TierRegistry
from gateway.tasks.catalogue import TaskPrompts
from gateway.tasks.definitions import BUILTIN_PROMPTS, TaskCatalog
from gateway.wiring.kit import LocalModelKit
from gateway.wiring.tiers import (
    TierBackends,
    make_registry,
    make_tier,
    plan_local_weights,
    preload,
)

log = logging.getLogger("gateway")


@dataclass
class Services:
    """Everything the routes may be given (by attribute name, as Litestar dependencies)."""

    settings: Settings
    compute: ComputePath
    metrics: GatewayMetrics
    scheduler: Scheduler
    local_models: LocalModels
    registry: TierRegistry
    chat: ChatService
    openai_chat: OpenAIChat
    completions: CompletionsService
    anthropic: AnthropicMessages
    responses: ResponsesService
    typing: HintService
    tasks: TaskService
    lifecycle: Lifecycle
    peers: Peers | None = None
    peer_inbox: PeerInbox | None = None
    embeddings: EmbeddingsService | None = None

    async def drain(self) -> None:
        """A stop was asked for (SIGTERM/SIGINT): refuse new requests (503 + Retry-After),
        fail the jobs still waiting for the slot (503), drop typing hints, and let running
        generations finish for up to ``shutdown_grace_seconds``; the rest are ended with a
        finish reason and a "shutting down" error event."""
        grace = self.settings.shutdown_grace_seconds
        log.info("draining: up to %.0f s for running generations", grace)
        self.lifecycle.draining = True
        self.typing.drop_all()
        self.scheduler.reject_waiting(ShuttingDownError())
        await self.chat.drain(grace)


def scheduler_config(settings: Settings) -> SchedulerConfig:
    s = settings.scheduler
    return SchedulerConfig(
        max_queued={
            Priority.USER: s.max_queued_user,
            Priority.TASK: s.max_queued_task,
            Priority.BACKGROUND: s.max_queued_background,
        },
        max_queue_wait=s.max_queue_wait_seconds,
        ageing_after=s.ageing_seconds,
        pipeline_grace=s.pipeline_grace_seconds,
        typing_quiet=s.typing_quiet_seconds,
        max_paused_with_memory=s.max_paused_with_cache,
        prefill_freeze_max=s.prefill_freeze_max_seconds,
        max_queued_hints=s.max_queued_hints,
        token_flush=s.token_flush_seconds,
    )


@dataclass
class Runtime:
    """What every service runs on: one scheduler (the inference slot and its thread), the
    residency of local models, the compute path and the metrics."""

    settings: Settings
    compute: ComputePath
    metrics: GatewayMetrics
    scheduler: Scheduler
    local_models: LocalModels


@asynccontextmanager
async def open_services(
    settings: Settings, kit: LocalModelKit, metrics: GatewayMetrics, lifecycle: Lifecycle
) -> AsyncIterator[Services]:
    """Open every service for one run of the app; close them all on the way out."""
    async with AsyncExitStack() as stack:
        stored = await open_response_store(settings, stack)
        runtime = await open_runtime(settings, kit, metrics, stack)
        registry = await open_tiers(runtime, kit, stack)
        services = await open_serving(runtime, registry, stored, lifecycle, stack)
        log.info("gateway ready: models %s", ", ".join(registry.names()))
        yield services


@dataclass(frozen=True)
class StoredChains:
    """Conversations kept on the server, in one SQLite file: OpenAI's stored responses and
    Anthropic's message threads, with the same retention."""

    responses: ResponseStore
    threads: ResponseStore


async def open_response_store(settings: Settings, stack: AsyncExitStack) -> StoredChains:
    r = settings.responses
    path = r.path or settings.cache_dir / "responses.sqlite3"
    stores = []
    for table in ("responses", "message_threads"):
        store = ResponseStore(path, r.max_stored, r.max_age_days * 86400, table=table)
        stack.push_async_callback(store.close)  # its thread is stopped even if opening fails
        await store.open()
        stores.append(store)
    return StoredChains(*stores)


async def open_runtime(
    settings: Settings, kit: LocalModelKit, metrics: GatewayMetrics, stack: AsyncExitStack
) -> Runtime:
    compute = choose_compute_path(settings.weights)
    log.info("compute path: %s", compute.as_dict())
    scheduler = Scheduler(scheduler_config(settings), metrics.scheduler)
    await scheduler.start()
    stack.push_async_callback(scheduler.stop)
    local_models = LocalModels(
        scheduler, metrics.residency, settings.memory_budget_bytes, kit.memory
    )
    await local_models.start()
    stack.callback(local_models.unload_all)  # after the keep-alive task has stopped
    stack.push_async_callback(local_models.stop)
    return Runtime(settings, compute, metrics, scheduler, local_models)


async def open_tiers(runtime: Runtime, kit: LocalModelKit, stack: AsyncExitStack) -> TierRegistry:
    """One backend per tier (closed on the way out), the preloads, and their registry."""
    settings, scheduler, local_models = runtime.settings, runtime.scheduler, runtime.local_models
    weights = await plan_local_weights(settings, kit, runtime.compute, scheduler)
    factory = TierBackends(
        settings, kit, runtime.compute, runtime.metrics, scheduler, local_models, weights
    )
    backends: list[Backend] = []
    stack.push_async_callback(close_backends, backends)
    tiers = {}
    for name, tier_settings in settings.tiers.items():
        backend = factory.backend(name, tier_settings)
        backends.append(backend)
        tiers[name] = make_tier(name, backend, tier_settings)
    await preload(settings, local_models)
    return make_registry(settings, tiers)


async def close_backends(backends: list[Backend]) -> None:
    for backend in backends:
        if isinstance(backend, LocalBackend):
            try:
                await backend.persist()
            except Exception:  # a full disk must not stop the shutdown
                log.exception("tier %s: prefix caches not saved", backend.info.tier)
        await backend.close()


async def open_serving(
    runtime: Runtime,
    registry: TierRegistry,
    stored: StoredChains,
    lifecycle: Lifecycle,
    stack: AsyncExitStack,
) -> Services:
    """The services behind the routes, over the tiers; the peers (each tier behind their
    dispatch) and their discovery, stopped before the tiers."""
    settings, metrics = runtime.settings, runtime.metrics
    catalog = TaskCatalog.load([BUILTIN_PROMPTS, *settings.task_folders])
    peers = await open_peers(settings, catalog.hash, metrics, stack)
    if peers is not None:
        registry = dispatch_to_peers(registry, Dispatcher(peers, runtime.scheduler, metrics.peers))
    task_prompts = TaskPrompts(catalog, registry)
    cache = settings.cache
    speculator = Speculator(
        metrics.speculation, cache.speculate_after_seconds, cache.speculate_tokens
    )
    history = ResponseHistory(stored.responses)
    hints = HintService(
        registry,
        metrics.hints,
        cache.hint_idle_seconds,
        task_prompts,
        speculator,
        stored_conversation=history.messages,
        gates=runtime.scheduler.typing,
    )
    chat = ChatService(registry, metrics.generation, hints, settings.max_completion_tokens)
    tasks = TaskService(task_prompts, chat)
    responses = ResponsesService(chat, stored.responses, settings.responses.unsupported_tools)
    services = Services(
        settings=settings,
        compute=runtime.compute,
        metrics=metrics,
        scheduler=runtime.scheduler,
        local_models=runtime.local_models,
        registry=registry,
        chat=chat,
        openai_chat=OpenAIChat(chat),
        completions=CompletionsService(chat),
        anthropic=AnthropicMessages(chat, stored.threads),
        responses=responses,
        typing=hints,
        tasks=tasks,
        lifecycle=lifecycle,
        peers=peers,
        peer_inbox=peer_inbox(runtime, tasks),
        embeddings=EmbeddingsService(registry, metrics.embeddings),
    )
    discovery = await start_discovery(settings, peers, node_id(settings), catalog.hash)
    if discovery is not None:
        stack.push_async_callback(discovery.stop)  # before the peers stop
    return services


async def open_peers(
    settings: Settings, tasks_hash: str, metrics: GatewayMetrics, stack: AsyncExitStack
) -> Peers | None:
    """The other gateways this one may hand work to (needs a secret and a node list)."""
    if not (settings.peers.secret and (settings.peers.nodes or settings.peers.discover)):
        return None
    peers = Peers(settings.peers, tasks_hash, metrics.peers)
    await peers.start()
    stack.push_async_callback(peers.stop)
    return peers


def peer_inbox(runtime: Runtime, tasks: TaskService) -> PeerInbox | None:
    """Where other gateways' signed requests arrive (needs the peer secret)."""
    settings = runtime.settings
    peer_settings = settings.peers
    if not peer_settings.secret:
        return None
    return PeerInbox(
        RequestVerifier(peer_settings.secret, peer_settings.replay_window_seconds),
        tasks,
        runtime.scheduler,
        runtime.metrics.peers,
        node_id=node_id(settings),
        version=gateway.__version__,
    )


def node_id(settings: Settings) -> str:
    """This gateway's name among its peers."""
    return settings.peers.node_id or f"{socket.gethostname()}:{settings.port}"

"""``create_app(settings)``: the one place where the gateway is wired together."""

from __future__ import annotations

import functools
import hmac
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from litestar import Litestar, MediaType, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware import ASGIMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.plugins.pydantic import PydanticPlugin
from litestar.response import File
from litestar.static_files import create_static_files_router
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

from gateway.config import ConfigError, Settings, TierSettings
from gateway.engines.backend import Backend, Priority
from gateway.engines.device import ComputePath, choose_compute_path
from gateway.engines.experts.plan import ExpertStreaming, StreamedExperts
from gateway.engines.experts.stats import CallbackListener, ExpertStats
from gateway.engines.local import LocalBackend
from gateway.engines.prefix_disk import DiskPrefixes
from gateway.engines.prefix_store import PrefixCacheStore
from gateway.engines.residency import LocalModels, Resident
from gateway.engines.runner import ModelRunner
from gateway.engines.upstream import OpenAIUpstreamBackend, UpstreamConfig, is_loopback_url
from gateway.engines.weights import (
    WeightsChoice,
    WeightsMode,
    WeightsPreference,
    choose_weights,
    plan_streamed,
)
from gateway.errors import AuthenticationError, ShuttingDownError
from gateway.metrics import GatewayMetrics
from gateway.modelstore.footprint import model_bytes
from gateway.modelstore.sources import ResolvedModel, parse_model_ref, resolve
from gateway.modelstore.store import KNOWN_MODELS, ModelStore
from gateway.peers.discovery import Discovery, start_discovery
from gateway.peers.dispatch import Dispatcher, dispatch_to_peers
from gateway.peers.inbox import PeerInbox
from gateway.peers.nodes import Peers
from gateway.peers.signing import RequestVerifier
from gateway.routes.body_guard import BodyGuardMiddleware
from gateway.routes.chat import ChatController
from gateway.routes.completions import CompletionsController
from gateway.routes.embeddings import EmbeddingsController
from gateway.routes.errors import EXCEPTION_HANDLERS
from gateway.routes.hints import HintController
from gateway.routes.messages import MessagesController
from gateway.routes.models import ModelsController
from gateway.routes.openapi import describe_truthfully
from gateway.routes.ops import OpsController
from gateway.routes.peer import PeerController
from gateway.routes.responses import ResponsesController
from gateway.routes.tasks import TasksController
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.serving.anthropic import AnthropicMessages
from gateway.serving.chat import ChatService
from gateway.serving.completions import CompletionsService
from gateway.serving.embeddings import EmbeddingsService
from gateway.serving.hints import HintService
from gateway.serving.openai_chat import OpenAIChat
from gateway.serving.response_store import ResponseStore
from gateway.serving.responses import ResponsesService
from gateway.serving.speculation import Speculator
from gateway.serving.tasks import TaskService
from gateway.serving.tiers import Tier, TierRegistry
from gateway.tasks.catalogue import TaskPrompts
from gateway.tasks.definitions import BUILTIN_PROMPTS, TaskCatalog

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


UNAUTHENTICATED_PATHS = frozenset({"/health", "/"})
# The playground's files are public: the page asks for the API key itself.
UNAUTHENTICATED_PREFIXES: tuple[str, ...] = ("/playground/",)
PEER_PREFIX = "/v1/peer/"
GATEWAY_VERSION = "0.1.0"  # as in pyproject.toml (also the OpenAPI document's version)
PLAYGROUND = Path(__file__).parent / "playground"


@dataclass
class Services:
    """Everything the routes may be given; built once per app in the lifespan."""

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


def mlx_runner_factory(settings: Settings) -> RunnerFactory:
    """Find each model (importing a GGUF the first time only) and load it with the MLX runner."""

    def build(
        model_id: str,
        compute: ComputePath,
        weights: WeightsMode,
        experts: StreamedExperts | None = None,
    ) -> ModelRunner:
        from gateway.engines.mlx_runner import MLXRunner

        model = resolve_model(settings, model_id)
        return MLXRunner(model_id, model.folder, compute, model.default_stop, weights, experts)

    return build


def resolve_model(settings: Settings, model_id: str) -> ResolvedModel:
    """The folder to load for a tier's model reference (``gateway.modelstore.sources``)."""
    store = ModelStore(settings.cache_dir)
    return resolve(parse_model_ref(model_id), store, progress=lambda msg: log.info("%s", msg))


def _memory_probe() -> dict[str, int]:
    from gateway.engines.mlx_runner import mlx_memory

    return mlx_memory()


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
class _Wiring:
    settings: Settings
    compute: ComputePath
    metrics: GatewayMetrics
    scheduler: Scheduler
    local_models: LocalModels
    prefix_store: PrefixCacheStore
    disk: DiskPrefixes
    build_runner: RunnerFactory
    # Per local tier: the form its weights will take and the bytes they will hold.
    weights: dict[str, WeightsChoice]

    def backend(self, name: str, tier: TierSettings) -> Backend:
        if tier.kind == "openai":
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
            return OpenAIUpstreamBackend(name, config, self.metrics, self.scheduler)
        weights = self.weights.get(name)
        load = functools.partial(
            self.build_runner, tier.model, self.compute, weights.mode if weights else "native"
        )
        expert_stats = None
        if weights is not None and weights.experts is not None:
            expert_stats = ExpertStats(_expert_listener(self.metrics, name))
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
            )
        )
        return LocalBackend(
            name, resident, self.local_models, self.scheduler, self.prefix_store, self.disk
        )


def response_store(settings: Settings) -> ResponseStore:
    r = settings.responses
    return ResponseStore(
        r.path or settings.cache_dir / "responses.sqlite3", r.max_stored, r.max_age_days * 86400
    )


def prefix_disk_folder(settings: Settings) -> Path:
    return settings.cache.persist_folder or settings.cache_dir / "prefix-cache"


def _describe(model: str) -> tuple[str, bool]:
    known = KNOWN_MODELS.get(model)
    return (known.description, known.base_model) if known else ("", False)


@dataclass
class Lifecycle:
    """Whether the gateway is draining (a stop was asked for): new requests get a 503."""

    draining: bool = False


class ApiKeyAndMetricsMiddleware(ASGIMiddleware):
    """Refuses new requests while draining, checks the bearer secret (when one is set) and
    counts requests by route and status."""

    def __init__(
        self,
        api_key: str | None,
        metrics: GatewayMetrics,
        lifecycle: Lifecycle,
        peers_signed: bool = False,
    ) -> None:
        self.expected = api_key.encode() if api_key else None
        # Peer requests are signed with the peer secret instead (a peer never has the key).
        self.key_free_prefixes = UNAUTHENTICATED_PREFIXES + ((PEER_PREFIX,) if peers_signed else ())
        self.metrics = metrics
        self.lifecycle = lifecycle

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        """``Authorization: Bearer <key>`` (the scheme in any case, RFC 7235) or, as
        Anthropic's clients send it, ``x-api-key: <key>``; compared in constant time."""
        assert self.expected is not None
        scheme, _, token = headers.get(b"authorization", b"").strip().partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.expected):
            return True
        return hmac.compare_digest(headers.get(b"x-api-key", b""), self.expected)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        status = 500

        async def send_and_count(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        async def receive_and_note(message_wait: Receive = receive) -> ReceiveMessage:
            nonlocal status
            message = await message_wait()
            if message["type"] == "http.disconnect" and status == 500:
                status = 499  # gone before any answer: nginx's code, not a server error
            return message

        try:
            if self.lifecycle.draining:
                status = 503
                raise ShuttingDownError()
            path = scope["path"]
            public = path in UNAUTHENTICATED_PATHS or path.startswith(self.key_free_prefixes)
            needs_key = self.expected is not None and not public
            if needs_key and not self._authorized(dict(scope["headers"])):
                status = 401
                raise AuthenticationError(
                    "Incorrect or missing API key (Authorization: Bearer ...)."
                )
            await next_app(scope, receive_and_note, send_and_count)
        finally:
            # Unmatched paths share one label: a scan of random paths must not grow /metrics.
            route = scope.get("path_template") or "unmatched"
            self.metrics.requests.labels(route, str(status)).inc()


def create_app(settings: Settings, runner_factory: RunnerFactory | None = None) -> Litestar:
    """Build the gateway app; tiers are set up in its lifespan (``runner_factory`` for tests)."""
    metrics = GatewayMetrics()
    lifecycle = Lifecycle()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        compute = choose_compute_path(settings.weights)
        log.info("compute path: %s", compute.as_dict())
        scheduler = Scheduler(scheduler_config(settings), metrics)
        await scheduler.start()
        local_models = LocalModels(
            scheduler,
            metrics,
            settings.memory_budget_bytes,
            memory_probe=_memory_probe if runner_factory is None else _no_memory,
        )
        await local_models.start()
        backends: list[Backend] = []
        discovery: Discovery | None = None
        stored_responses = response_store(settings)
        try:
            await stored_responses.open()
            weights: dict[str, WeightsChoice] = {}
            if runner_factory is None:
                plan = _weights_planner(settings, compute)
                for name, tier_settings in settings.tiers.items():
                    if tier_settings.kind == "mlx":
                        # Importing (first time only) uses MLX: on the inference thread.
                        weights[name] = await scheduler.run_on_engine_thread(
                            functools.partial(
                                plan,
                                tier_settings.model,
                                tier_settings.weights or settings.weights,
                                _expert_streaming(name, tier_settings),
                            )
                        )
            wiring = _Wiring(
                settings=settings,
                compute=compute,
                metrics=metrics,
                scheduler=scheduler,
                local_models=local_models,
                prefix_store=PrefixCacheStore(settings.cache.prefix_cache_bytes, metrics),
                disk=DiskPrefixes(
                    prefix_disk_folder(settings), settings.cache.persist_prefix_bytes
                ),
                build_runner=runner_factory or mlx_runner_factory(settings),
                weights=weights,
            )
            tiers = {}
            for name, tier_settings in settings.tiers.items():
                backend = wiring.backend(name, tier_settings)
                backends.append(backend)
                description, base_model = _describe(tier_settings.model)
                tiers[name] = Tier(name, backend, int(time.time()), description, base_model)
            for resident in local_models.residents:
                if settings.tiers[resident.tier].preload:
                    await local_models.acquire(resident)
                    local_models.release(resident)
            assert settings.default_tier is not None
            registry = TierRegistry(tiers, settings.aliases, settings.default_tier)
            catalog = TaskCatalog.load([BUILTIN_PROMPTS, *settings.task_folders])
            peers = None
            peer_settings = settings.peers
            if peer_settings.secret and (peer_settings.nodes or peer_settings.discover):
                peers = Peers(peer_settings, catalog.hash, metrics)
                await peers.start()
                registry = dispatch_to_peers(registry, Dispatcher(peers, scheduler, metrics))
            task_prompts = TaskPrompts(catalog, registry)
            speculator = Speculator(
                metrics, settings.cache.speculate_after_seconds, settings.cache.speculate_tokens
            )
            typing = HintService(
                registry, metrics, settings.cache.hint_idle_seconds, task_prompts, speculator
            )
            chat = ChatService(registry, metrics, typing, settings.max_completion_tokens)
            tasks = TaskService(task_prompts, chat)
            responses = ResponsesService(chat, stored_responses)
            typing.stored_conversation = responses.stored_conversation
            peer_inbox = None
            node_id = peer_settings.node_id or f"{socket.gethostname()}:{settings.port}"
            if peer_settings.secret:
                peer_inbox = PeerInbox(
                    RequestVerifier(peer_settings.secret, peer_settings.replay_window_seconds),
                    tasks,
                    scheduler,
                    metrics,
                    node_id=node_id,
                    version=GATEWAY_VERSION,
                )
            app.state.services = Services(
                settings=settings,
                compute=compute,
                metrics=metrics,
                scheduler=scheduler,
                local_models=local_models,
                registry=registry,
                chat=chat,
                openai_chat=OpenAIChat(chat),
                completions=CompletionsService(chat),
                anthropic=AnthropicMessages(chat),
                responses=responses,
                typing=typing,
                tasks=tasks,
                lifecycle=lifecycle,
                peers=peers,
                peer_inbox=peer_inbox,
                embeddings=EmbeddingsService(registry, metrics),
            )
            discovery = await start_discovery(settings, peers, node_id, catalog.hash)
            log.info("gateway ready: models %s", ", ".join(registry.names()))
            yield
        finally:
            if discovery is not None:
                await discovery.stop()
            services = getattr(app.state, "services", None)
            if services is not None and services.peers is not None:
                await services.peers.stop()
            for backend in backends:
                if isinstance(backend, LocalBackend):
                    try:
                        await backend.persist()
                    except Exception:  # a full disk must not stop the shutdown
                        log.exception("tier %s: prefix caches not saved", backend.tier)
                await backend.close()
            await local_models.stop()
            local_models.unload_all()
            await scheduler.stop()
            await stored_responses.close()

    def provide(attribute: str) -> Provide:
        def get(state: State) -> Any:
            return getattr(state.services, attribute)

        return Provide(get, sync_to_thread=False)

    return Litestar(
        route_handlers=[
            playground_page,
            create_static_files_router(path="/playground", directories=[PLAYGROUND]),
            ChatController,
            CompletionsController,
            EmbeddingsController,
            MessagesController,
            ResponsesController,
            ModelsController,
            OpsController,
            TasksController,
            HintController,
            *([PeerController] if settings.peers.secret else []),
        ],
        lifespan=[lifespan],
        on_startup=[describe_truthfully],
        dependencies={
            name: provide(name)
            for name in (
                "chat",
                "openai_chat",
                "completions",
                "embeddings",
                "anthropic",
                "responses",
                "typing",
                "registry",
                "scheduler",
                "metrics",
                "compute",
                "local_models",
                "tasks",
                "peers",
                "peer_inbox",
            )
        },
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[
            ApiKeyAndMetricsMiddleware(
                settings.api_key, metrics, lifecycle, peers_signed=bool(settings.peers.secret)
            ),
            BodyGuardMiddleware(settings.max_request_bytes, settings.request_body_seconds),
        ],
        request_max_body_size=settings.max_request_bytes,
        # Strict, as OpenAI's API is: "5" is not an integer.
        plugins=[PydanticPlugin(validate_strict=True)],
        openapi_config=OpenAPIConfig(
            title="onemac-gateway",
            version=GATEWAY_VERSION,
            description="OpenAI-compatible local LLM gateway: one Mac, one inference.",
        ),
        debug=False,
    )


@get("/", include_in_schema=False, media_type=MediaType.HTML)
async def playground_page() -> File:
    """The playground (gateway extension): a chat page that shows typing hints at work."""
    return File(PLAYGROUND / "index.html", content_disposition_type="inline")


def _no_memory() -> dict[str, int]:
    return {"active": 0, "peak": 0}


def _weights_planner(
    settings: Settings, compute: ComputePath
) -> Callable[[str, WeightsPreference, tuple[str, ExpertStreaming] | None], WeightsChoice]:
    """The form of a model's weights and the bytes they will hold once loaded (importing the
    model first, once, if needed)."""

    def plan(
        model_id: str,
        preference: WeightsPreference,
        streaming: tuple[str, ExpertStreaming] | None = None,
    ) -> WeightsChoice:
        folder = resolve_model(settings, model_id).folder
        if streaming is not None:
            tier, streamed = streaming
            try:
                return plan_streamed(
                    compute, folder, settings.memory_budget_bytes, preference, streamed
                )
            except ValueError as exc:
                raise ConfigError(f"tier {tier!r}: {exc}") from exc
        return choose_weights(
            compute, model_bytes(folder), settings.memory_budget_bytes, preference
        )

    return plan


def _expert_streaming(name: str, tier: TierSettings) -> tuple[str, ExpertStreaming] | None:
    if tier.experts != "stream":
        return None
    return name, ExpertStreaming(tier.expert_slots, tier.expert_cache_bytes, tier.expert_policy)


def _expert_listener(metrics: GatewayMetrics, tier: str) -> CallbackListener:
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


async def drain(app: Litestar) -> None:
    """A stop was asked for (SIGTERM/SIGINT): refuse new requests (503 + Retry-After), fail
    the jobs still waiting for the slot (503), drop typing hints, and let running
    generations finish for up to ``shutdown_grace_seconds``; the rest are ended with a
    finish reason and a "shutting down" error event. The server then stops."""
    services: Services | None = getattr(app.state, "services", None)
    if services is None:  # still starting
        return
    log.info(
        "draining: up to %.0f s for running generations", services.settings.shutdown_grace_seconds
    )
    services.lifecycle.draining = True
    services.typing.drop_all()
    services.scheduler.reject_waiting(ShuttingDownError())
    await services.chat.drain(services.settings.shutdown_grace_seconds)

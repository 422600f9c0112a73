"""``create_app(settings)``: the one place where the gateway is wired together."""

from __future__ import annotations

import functools
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware import ASGIMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.plugins.pydantic import PydanticPlugin
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from gateway.config import Settings
from gateway.engines.base import Engine
from gateway.engines.device import ComputePath, choose_compute_path
from gateway.errors import AuthenticationError
from gateway.metrics import GatewayMetrics
from gateway.modelstore.store import ModelStore
from gateway.routes.chat import ChatController
from gateway.routes.errors import EXCEPTION_HANDLERS
from gateway.routes.models import ModelsController
from gateway.routes.ops import OpsController
from gateway.routes.typing import TypingController
from gateway.scheduler.jobs import Priority
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.serving.chat import ChatService
from gateway.serving.models import ModelRegistry, ServedModel
from gateway.serving.prompt_cache import PrefixCacheStore
from gateway.serving.typing import TypingService

log = logging.getLogger("gateway")

EngineFactory = Callable[[str, ComputePath], Engine]
UNAUTHENTICATED_PATHS = frozenset({"/health"})


@dataclass
class Services:
    """Everything the routes may be given; built once per app in the lifespan."""

    settings: Settings
    compute: ComputePath
    metrics: GatewayMetrics
    scheduler: Scheduler
    registry: ModelRegistry
    chat: ChatService
    typing: TypingService


def mlx_engine_factory(settings: Settings) -> EngineFactory:
    """Import (first time only) and load each model with the MLX engine."""

    def build(model_id: str, compute: ComputePath) -> Engine:
        from gateway.engines.mlx_engine import MLXEngine

        folder = ModelStore(settings.cache_dir).ensure(model_id, lambda msg: log.info("%s", msg))
        return MLXEngine(model_id, folder, compute)

    return build


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
    )


class ApiKeyAndMetricsMiddleware(ASGIMiddleware):
    """Checks the bearer secret (when one is set) and counts requests by route and status."""

    def __init__(self, api_key: str | None, metrics: GatewayMetrics) -> None:
        self.expected = f"Bearer {api_key}".encode() if api_key else None
        self.metrics = metrics

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        status = 500

        async def send_and_count(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if self.expected is not None and scope["path"] not in UNAUTHENTICATED_PATHS:
                given = dict(scope["headers"]).get(b"authorization", b"")
                if not hmac.compare_digest(given, self.expected):
                    status = 401
                    raise AuthenticationError(
                        "Incorrect or missing API key (Authorization: Bearer ...)."
                    )
            await next_app(scope, receive, send_and_count)
        finally:
            route = scope.get("path_template") or scope["path"]
            self.metrics.requests.labels(route, str(status)).inc()


def create_app(settings: Settings, engine_factory: EngineFactory | None = None) -> Litestar:
    """Build the gateway app; engines load in its lifespan (``engine_factory`` for tests)."""
    metrics = GatewayMetrics()
    build_engine = engine_factory or mlx_engine_factory(settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        compute = choose_compute_path(settings.weights)
        log.info("compute path: %s", compute.as_dict())
        scheduler = Scheduler(scheduler_config(settings), metrics)
        await scheduler.start()
        try:
            models = {}
            for model_id in settings.models:
                engine = await scheduler.run_on_engine_thread(
                    functools.partial(build_engine, model_id, compute)
                )
                models[model_id] = ServedModel(model_id, engine, int(time.time()))
            registry = ModelRegistry(models, settings.aliases, settings.default_model)
            prefix_cache = PrefixCacheStore(settings.cache.prefix_cache_bytes, metrics)
            typing = TypingService(
                registry, scheduler, metrics, prefix_cache, settings.cache.hint_idle_seconds
            )
            app.state.services = Services(
                settings=settings,
                compute=compute,
                metrics=metrics,
                scheduler=scheduler,
                registry=registry,
                chat=ChatService(registry, scheduler, metrics, prefix_cache, typing),
                typing=typing,
            )
            log.info("gateway ready: models %s", ", ".join(registry.names()))
            yield
        finally:
            await scheduler.stop()

    def provide(attribute: str) -> Provide:
        def get(state: State) -> Any:
            return getattr(state.services, attribute)

        return Provide(get, sync_to_thread=False)

    return Litestar(
        route_handlers=[ChatController, ModelsController, OpsController, TypingController],
        lifespan=[lifespan],
        dependencies={
            name: provide(name)
            for name in ("chat", "typing", "registry", "scheduler", "metrics", "compute")
        },
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[ApiKeyAndMetricsMiddleware(settings.api_key, metrics)],
        request_max_body_size=settings.max_request_bytes,
        # Strict, as OpenAI's API is: "5" is not an integer.
        plugins=[PydanticPlugin(validate_strict=True)],
        openapi_config=OpenAPIConfig(
            title="onemac-gateway",
            version="0.1.0",
            description="OpenAI-compatible local LLM gateway: one Mac, one inference.",
        ),
        debug=False,
    )

"""``create_app(settings)``: the gateway's table of contents (vLLM's ``build_app``).

What it serves (the controllers), what stands in front of every request (the middlewares,
outermost first) and where its services come from: ``gateway.wiring.open_services`` opens
them in the app's lifespan and closes them when it ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from litestar import Litestar, MediaType, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.logging.config import LoggingConfig
from litestar.openapi import OpenAPIConfig
from litestar.plugins.pydantic import PydanticPlugin
from litestar.response import File
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler, Middleware

import gateway
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.routes.auth import api_key_middleware
from gateway.routes.body_guard import BodyGuardMiddleware
from gateway.routes.chat import ChatController
from gateway.routes.completions import CompletionsController
from gateway.routes.draining import DrainingMiddleware, Lifecycle
from gateway.routes.embeddings import EmbeddingsController
from gateway.routes.errors import EXCEPTION_HANDLERS
from gateway.routes.hints import HintController
from gateway.routes.messages import MessagesController
from gateway.routes.models import ModelsController
from gateway.routes.openapi import describe_truthfully
from gateway.routes.ops import OpsController
from gateway.routes.peer import PeerController
from gateway.routes.request_metrics import RequestMetricsMiddleware
from gateway.routes.responses import ResponsesController
from gateway.routes.tasks import TasksController
from gateway.wiring import GivenRunnerKit, MLXModelKit, RunnerFactory, Services, open_services

PLAYGROUND = Path(__file__).parent / "playground"

# The services the routes ask for by name (``Services``' attributes).
INJECTED = (
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


def create_app(settings: Settings, runner_factory: RunnerFactory | None = None) -> Litestar:
    """Build the gateway app; its services open in its lifespan (``runner_factory``: tests
    load fake models instead of MLX ones)."""
    kit = MLXModelKit(settings) if runner_factory is None else GivenRunnerKit(runner_factory)
    metrics = GatewayMetrics()
    lifecycle = Lifecycle()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_services(settings, kit, metrics, lifecycle) as services:
            app.state.services = services
            yield

    return Litestar(
        route_handlers=route_handlers(settings),
        lifespan=[lifespan],
        on_startup=[describe_truthfully],
        dependencies={name: _provide(name) for name in INJECTED},
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=middleware(settings, metrics, lifecycle),
        request_max_body_size=settings.max_request_bytes,
        # Strict, as OpenAI's API is: "5" is not an integer.
        plugins=[PydanticPlugin(validate_strict=True)],
        # Litestar's default logging config pins the root logger at INFO: the setting's level.
        logging_config=LoggingConfig(
            root={"handlers": ["queue_listener"], "level": settings.log_level.upper()}
        ),
        openapi_config=OpenAPIConfig(
            title="onemac-gateway",
            version=gateway.__version__,
            description="OpenAI-compatible local LLM gateway: one Mac, one inference.",
        ),
        debug=False,
    )


def route_handlers(settings: Settings) -> list[ControllerRouterHandler]:
    """One controller per API surface; the peer routes only with a peer secret."""
    return [
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
    ]


def middleware(
    settings: Settings, metrics: GatewayMetrics, lifecycle: Lifecycle
) -> list[Middleware]:
    """Outermost first: every request is counted (also those refused below), refused while
    draining, checked for the API key (when one is set), then its body read within bounds."""
    key = settings.api_key
    return [
        RequestMetricsMiddleware(metrics.requests),
        DrainingMiddleware(lifecycle),
        *([api_key_middleware(key, peers_signed=bool(settings.peers.secret))] if key else []),
        BodyGuardMiddleware(settings.max_request_bytes, settings.request_body_seconds),
    ]


def _provide(attribute: str) -> Provide:
    def get(state: State) -> Any:
        return getattr(state.services, attribute)

    return Provide(get, sync_to_thread=False)


@get("/", include_in_schema=False, media_type=MediaType.HTML)
async def playground_page() -> File:
    """The playground (gateway extension): a chat page that shows typing hints at work."""
    return File(PLAYGROUND / "index.html", content_disposition_type="inline")


async def drain(app: Litestar) -> None:
    """A stop was asked for (SIGTERM/SIGINT): ``Services.drain``, then the server stops."""
    services: Services | None = getattr(app.state, "services", None)
    if services is None:  # still starting
        return
    await services.drain()

"""The gateway's middlewares, in the order create_app stacks them, on a two-route app:
counting, draining, the API key (on Litestar's authentication middleware) and the body
guard, each refusing with its own error envelope and counted with its own status."""

from __future__ import annotations

from litestar import Litestar, get, post
from litestar.params import JSONBody
from litestar.testing import AsyncTestClient

from gateway.app import middleware
from gateway.config import load_settings
from gateway.metrics import GatewayMetrics
from gateway.routes.draining import Lifecycle
from gateway.routes.errors import EXCEPTION_HANDLERS

KEY = {"Authorization": "Bearer s3cret"}


@get("/v1/models")
async def models() -> dict[str, str]:
    return {"object": "list"}


@post("/v1/peer/hello")
async def peer_hello() -> dict[str, str]:
    return {"hello": "peer"}


@post("/v1/echo")
async def echo(data: JSONBody[dict[str, str]]) -> dict[str, str]:
    return data


def stacked(peers_signed: bool = False) -> tuple[Litestar, GatewayMetrics, Lifecycle]:
    overrides: dict[str, object] = {"api_key": "s3cret", "max_request_bytes": 1024}
    if peers_signed:
        overrides["peers"] = {"secret": "a-peer-secret-0123456789abcdef"}
    settings = load_settings(overrides=overrides, environ={})
    metrics, lifecycle = GatewayMetrics(), Lifecycle()
    app = Litestar(
        [models, peer_hello, echo],
        middleware=middleware(settings, metrics, lifecycle),
        exception_handlers=EXCEPTION_HANDLERS,
    )
    return app, metrics, lifecycle


def count(metrics: GatewayMetrics, route: str, status: int) -> float:
    """The value of gateway_requests_total for the route and status (0 when absent)."""
    sample = f'gateway_requests_total{{route="{route}",status="{status}"}} '
    for line in metrics.exposition().decode().splitlines():
        if line.startswith(sample):
            return float(line.removeprefix(sample))
    return 0.0


async def test_every_method_needs_the_key_options_included() -> None:
    app, metrics, _ = stacked()
    async with AsyncTestClient(app) as client:
        refused = await client.options("/v1/models")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert (await client.options("/v1/models", headers=KEY)).status_code != 401
    assert count(metrics, "/v1/models", 401) == 1


async def test_peer_paths_are_key_free_only_when_peers_sign_their_requests() -> None:
    for peers_signed, expected in ((False, 401), (True, 201)):
        app, _, _ = stacked(peers_signed)
        async with AsyncTestClient(app) as client:
            assert (await client.post("/v1/peer/hello")).status_code == expected


async def test_a_body_too_large_is_counted_as_413_not_500() -> None:
    app, metrics, _ = stacked()
    async with AsyncTestClient(app) as client:
        answer = await client.post("/v1/echo", json={"text": "x" * 2000}, headers=KEY)
        assert answer.status_code == 413
        assert answer.json()["error"]["code"] == "request_too_large"
    assert count(metrics, "/v1/echo", 413) == 1
    assert count(metrics, "/v1/echo", 500) == 0


async def test_draining_refuses_before_the_key_is_checked() -> None:
    app, metrics, lifecycle = stacked()
    async with AsyncTestClient(app) as client:
        lifecycle.draining = True
        refused = await client.get("/v1/models")  # no key: still a 503, not a 401
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "shutting_down"
        assert int(refused.headers["Retry-After"]) >= 1
    assert count(metrics, "/v1/models", 503) == 1

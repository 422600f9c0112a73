"""The app's wiring in-process (Litestar's test client, a fake engine): auth and metrics."""

from __future__ import annotations

import logging

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.config import load_settings
from tests.unit.fake_runner import ANSWER, FakeRunner

BODY = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hi"}]}


async def test_a_secret_is_required_everywhere_but_health() -> None:
    settings = load_settings(
        overrides={"api_key": "s3cret", "cache": {"prefix_cache_bytes": 0}}, environ={}
    )
    app = create_app(settings, runner_factory=lambda *_: FakeRunner())  # type: ignore[arg-type,return-value]
    async with AsyncTestClient(app) as client:
        assert (await client.get("/health")).status_code == 200
        denied = await client.post("/v1/chat/completions", json=BODY)
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"
        wrong = await client.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        allowed = await client.post(
            "/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer s3cret"}
        )
        assert allowed.status_code == 200
        assert allowed.json()["choices"][0]["message"]["content"] == ANSWER
        metrics = (await client.get("/metrics", headers={"Authorization": "Bearer s3cret"})).text
        assert 'gateway_requests_total{route="/v1/chat/completions",status="401"} 1.0' in metrics
        assert 'gateway_requests_total{route="/v1/chat/completions",status="200"} 1.0' in metrics


async def test_auth_edges_bearer_scheme_x_api_key_and_www_authenticate() -> None:
    settings = load_settings(
        overrides={"api_key": "s3cret", "cache": {"prefix_cache_bytes": 0}}, environ={}
    )
    app = create_app(settings, runner_factory=lambda *_: FakeRunner())  # type: ignore[arg-type,return-value]
    async with AsyncTestClient(app) as client:
        denied = await client.get("/v1/models")
        assert denied.status_code == 401
        assert denied.headers["WWW-Authenticate"].startswith("Bearer")
        for headers in (
            {"Authorization": "bearer s3cret"},
            {"Authorization": "BEARER  s3cret"},
            {"x-api-key": "s3cret"},
        ):
            assert (await client.get("/v1/models", headers=headers)).status_code == 200
        assert (
            await client.get("/v1/models", headers={"Authorization": "Basic s3cret"})
        ).status_code == 401
        unknown = await client.get("/no/such/path", headers={"x-api-key": "s3cret"})
        assert unknown.status_code == 404
        metrics = (await client.get("/metrics", headers={"x-api-key": "s3cret"})).text
        assert "/no/such/path" not in metrics  # no label per unknown path


@pytest.mark.parametrize("level", ["debug", "warning"])
async def test_the_log_level_setting_reaches_the_gateways_loggers(level: str) -> None:
    """Litestar's default logging config pinned the root logger at INFO, whatever the
    setting said: a debug line of the engines never showed."""
    root = logging.getLogger()
    before = root.level
    try:
        settings = load_settings(overrides={"log_level": level}, environ={})
        app = create_app(settings, runner_factory=lambda *_: FakeRunner())  # type: ignore[arg-type,return-value]
        async with AsyncTestClient(app):
            engine_log = logging.getLogger("gateway.engines.mlx_runner")
            assert engine_log.getEffectiveLevel() == getattr(logging, level.upper())
    finally:
        root.setLevel(before)


def test_an_unknown_log_level_is_a_config_error() -> None:
    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="log_level"):
        load_settings(overrides={"log_level": "verbose"}, environ={})

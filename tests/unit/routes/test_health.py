"""``GET /health`` in-process on a fake runner: a dead scheduler dispatcher is a 503."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.config import load_settings
from tests.unit.fake_runner import FakeRunner

BODY = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hi"}]}


def app() -> Any:
    settings = load_settings(overrides={"cache": {"prefix_cache_bytes": 0}}, environ={})
    return create_app(settings, runner_factory=lambda *_: FakeRunner())  # type: ignore[arg-type,return-value]


async def test_health_answers_503_once_the_dispatcher_died() -> None:
    gateway = app()
    async with AsyncTestClient(gateway) as client:
        healthy = await client.get("/health")
        assert healthy.status_code == 200 and healthy.json()["status"] == "ok"
        scheduler = gateway.state.services.scheduler

        def broken() -> None:  # a bug in the slot's own code: the dispatcher dies of it
            raise RuntimeError("slot bookkeeping failed")

        scheduler.observer.slot_taken = broken
        chat = await asyncio.wait_for(client.post("/v1/chat/completions", json=BODY), 10)
        assert chat.status_code == 503, chat.text  # the request fails, it does not hang
        assert not scheduler.alive
        dead = await client.get("/health")
        assert dead.status_code == 503
        assert dead.json()["error"]["code"] == "service_unavailable"
        assert "dispatcher" in dead.json()["error"]["message"]

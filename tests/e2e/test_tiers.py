"""Tiers over HTTP with the official SDK: the embedded model, Gemma 3 (a base model) and an
OpenAI upstream (``mlx_lm.server``, started here) in one gateway."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.config import default_cache_dir
from gateway.modelstore.store import ModelStore
from tests.e2e.conftest import MODEL
from testsupport.process import (
    RunningGateway,
    RunningUpstream,
    start_gateway,
    start_mlx_lm_server,
)

pytestmark = pytest.mark.e2e
GEMMA = "gemma-3-270m"
NO_EOS = {"2": -100}  # SmolLM2's <|im_end|>: keeps a generation going


def model_folder(model: str) -> Path:
    store = ModelStore(default_cache_dir())
    return store.ensure(model)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningUpstream]:
    running = start_mlx_lm_server(tmp_path_factory.mktemp("upstream"), model_folder(MODEL))
    yield running
    running.stop()


def tiers_config(upstream_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "tiers": {
            "fast": {"kind": "mlx", "model": MODEL},
            "base": {"kind": "mlx", "model": GEMMA},
            "big": {"kind": "openai", "base_url": upstream_url, "model": "default_model"},
            # mlx_lm.server answers 404 for a model it cannot find (it has no hub here).
            "wrong": {"kind": "openai", "base_url": upstream_url, "model": "no/such-model"},
        },
        **extra,
    }


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory, upstream: RunningUpstream
) -> Iterator[RunningGateway]:
    running = start_gateway(tmp_path_factory.mktemp("tiers"), tiers_config(upstream.base_url))
    yield running
    running.stop()


def test_models_lists_every_tier_with_its_kind_and_state(gw: RunningGateway) -> None:
    models = {m.id: m for m in gw.openai().models.list().data}
    assert {"fast", "base", "big", MODEL, GEMMA, "default_model"} <= set(models)
    big = models["big"].model_dump()
    assert (big["tier"], big["kind"], big["loaded"]) == ("big", "openai", True)
    base = models[GEMMA].model_dump()
    assert (base["tier"], base["kind"], base["base_model"]) == ("base", "mlx", True)
    assert models["fast"].model_dump()["base_model"] is False
    health = gw.http().get("/health").json()
    assert health["tiers"]["big"]["state"] == "reachable"
    assert health["tiers"]["fast"]["state"] in ("loaded", "unloaded")


@pytest.mark.parametrize("tier", ["fast", "base", "big"])
def test_every_tier_answers_json_and_stream(gw: RunningGateway, tier: str) -> None:
    client = gw.openai()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.chat.completions.create(
        model=tier, messages=messages, max_tokens=12, temperature=0
    )
    text = reply.choices[0].message.content
    assert text and text.strip()
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    assert reply.usage.completion_tokens >= 1

    pieces, finish = [], None
    stream = client.chat.completions.create(
        model=tier,
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == text  # greedy: the same answer streamed
    assert finish == reply.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == reply.usage.completion_tokens


def test_an_upstream_gets_the_repetition_penalty(gw: RunningGateway) -> None:
    """Passed on as vLLM and mlx_lm.server name it: the upstream's reply to a loop changes."""
    client = gw.openai()
    loop = [{"role": "user", "content": "Repeat after me: " + "\U0001f680" * 20}]

    def reply(**penalty: float) -> str | None:
        completion = client.chat.completions.create(
            model="big", messages=loop, max_tokens=32, temperature=0, extra_body=penalty
        )
        return completion.choices[0].message.content

    assert reply() != reply(repetition_penalty=1.3)


def test_upstream_relays_cached_tokens(gw: RunningGateway) -> None:
    client = gw.openai()
    messages = [
        {"role": "system", "content": "You answer briefly. " * 20},
        {"role": "user", "content": "Hi"},
    ]
    client.chat.completions.create(model="big", messages=messages, max_tokens=4, temperature=0)
    again = client.chat.completions.create(
        model="big", messages=messages, max_tokens=4, temperature=0
    )
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert (again.usage.prompt_tokens_details.cached_tokens or 0) > 0


def test_same_machine_upstream_holds_the_slot_and_disconnect_frees_it(gw: RunningGateway) -> None:
    client = gw.openai()
    stream = client.chat.completions.create(
        model="big",
        messages=[{"role": "user", "content": "Count to one thousand."}],
        max_tokens=2000,
        logit_bias=NO_EOS,
        stream=True,
    )
    seen = 0
    for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen >= 3:
            break
    slot = gw.scheduler()["slot"]
    assert slot is not None and slot["kind"] == "upstream"
    stream.close()
    deadline = time.monotonic() + 5
    while gw.scheduler()["slot"] is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.scheduler()["slot"] is None


def test_mixed_load_over_two_local_tiers_keeps_one_job_in_the_slot(gw: RunningGateway) -> None:
    client = gw.openai()
    errors: list[BaseException] = []

    def ask(tier: str, index: int) -> None:
        try:
            reply = client.chat.completions.create(
                model=tier,
                messages=[{"role": "user", "content": f"Say something about {index}."}],
                max_tokens=8,
            )
            assert reply.choices[0].message.content is not None
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [
        threading.Thread(target=ask, args=(tier, i))
        for i in range(3)
        for tier in ("fast", "base", "big")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert gw.scheduler()["max_occupancy_seen"] == 1


# -- an upstream that fails ----------------------------------------------------------------


def test_the_upstreams_own_4xx_is_passed_through(gw: RunningGateway) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        gw.openai().chat.completions.create(
            model="wrong", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
    assert "upstream" in refused.value.message
    assert gw.http().get("/health").status_code == 200


@pytest.fixture
def own_upstream(tmp_path: Path) -> Iterator[RunningUpstream]:
    running = start_mlx_lm_server(tmp_path / "upstream", model_folder(MODEL))
    yield running
    running.stop()


def test_upstream_killed_mid_stream_ends_with_an_error_event(
    tmp_path: Path, own_upstream: RunningUpstream
) -> None:
    gateway = start_gateway(
        tmp_path / "gw",
        {
            "tiers": {
                "fast": {"kind": "mlx", "model": MODEL, "preload": True},
                "big": {
                    "kind": "openai",
                    "base_url": own_upstream.base_url,
                    "model": "default_model",
                },
            }
        },
    )
    try:
        client = gateway.openai()
        stream = client.chat.completions.create(
            model="big",
            messages=[{"role": "user", "content": "Write a long story."}],
            max_tokens=2000,
            logit_bias=NO_EOS,
            stream=True,
        )
        received = 0
        with pytest.raises(openai.APIError, match="upstream"):
            for chunk in stream:
                received += bool(chunk.choices and chunk.choices[0].delta.content)
                if received == 3:
                    own_upstream.kill()
        assert received >= 3
        # The gateway stays healthy and serves the next request.
        health = gateway.http().get("/health").json()
        assert health["status"] == "ok" and health["tiers"]["big"]["state"] == "unreachable"
        assert gateway.scheduler()["slot"] is None
        reply = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert reply.choices[0].message.content
        # An upstream that is gone: a 502 envelope, at once.
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(
                model="big", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
        assert refused.value.status_code == 502
        assert refused.value.body["code"] == "bad_gateway"  # type: ignore[index]
        metrics = gateway.http().get("/metrics").text
        assert 'gateway_upstream_errors_total{error="transport",tier="big"}' in metrics
    finally:
        gateway.stop()


def test_a_silent_upstream_times_out_with_504(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        gateway = start_gateway(
            tmp_path / "gw",
            {
                "tiers": {
                    "slow": {
                        "kind": "openai",
                        "base_url": f"http://127.0.0.1:{port}/v1",
                        "model": "m",
                        "read_timeout_seconds": 1.0,
                        "same_machine": False,
                    }
                }
            },
        )
        try:
            started = time.monotonic()
            response = httpx.post(
                f"{gateway.base_url}/v1/chat/completions",
                json={"model": "slow", "messages": [{"role": "user", "content": "Hi"}]},
                timeout=30,
            )
            assert response.status_code == 504
            assert response.json()["error"]["code"] == "upstream_timeout"
            assert time.monotonic() - started < 10
        finally:
            gateway.stop()


# -- lazy loading under a memory budget ----------------------------------------------------


def metric(gateway: RunningGateway, line_start: str) -> float:
    for line in gateway.http().get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def ask(gateway: RunningGateway, tier: str) -> str:
    reply = gateway.openai().chat.completions.create(
        model=tier, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0
    )
    return reply.choices[0].message.content or ""


def test_budget_for_one_model_keep_alive_unloads_and_reloads(tmp_path: Path) -> None:
    from gateway.engines.device import choose_compute_path
    from gateway.engines.footprint import model_bytes

    # The weight form is fixed here: under "auto" a budget this small would make the gateway
    # keep the larger model quantized (gateway.engines.weights), and both would fit.
    form = "float32" if choose_compute_path().dequantize else "4bit"
    sizes = [model_bytes(model_folder(m)) for m in (MODEL, GEMMA)]
    small, large = sorted(s.float32 if form == "float32" else s.quantized for s in sizes)
    budget = large + small // 2  # room for either model, never both
    keep_alive = 2.0
    gateway = start_gateway(
        tmp_path / "gw",
        {
            "weights": form,
            "memory_budget_bytes": budget,
            "tiers": {
                "a": {"kind": "mlx", "model": MODEL, "keep_alive_seconds": keep_alive},
                "b": {"kind": "mlx", "model": GEMMA, "keep_alive_seconds": keep_alive},
            },
        },
    )
    try:
        http = gateway.http()
        tiers = lambda: http.get("/health").json()["tiers"]  # noqa: E731
        assert tiers()["a"]["state"] == tiers()["b"]["state"] == "unloaded"  # lazy
        assert ask(gateway, "a")
        assert ask(gateway, "b")  # loading b unloads the idle a
        state = tiers()
        assert (state["a"]["state"], state["b"]["state"]) == ("unloaded", "loaded")
        assert state["b"]["memory_bytes"] > 0
        assert metric(gateway, 'gateway_model_unloads_total{reason="budget",tier="a"}') == 1
        # Idle past its keep-alive, b is unloaded and its memory returned.
        deadline = time.monotonic() + keep_alive + 10
        while tiers()["b"]["state"] != "unloaded" and time.monotonic() < deadline:
            time.sleep(0.25)
        assert tiers()["b"]["state"] == "unloaded"
        assert http.get("/health").json()["memory"]["active"] < small // 4
        assert metric(gateway, 'gateway_model_loaded_bytes{tier="b"}') == 0
        assert ask(gateway, "b")  # and loaded again on the next request
        assert metric(gateway, 'gateway_model_loads_total{tier="b"}') == 2
        assert gateway.scheduler()["max_occupancy_seen"] == 1
    finally:
        gateway.stop()


def test_a_budget_too_small_for_any_model_is_a_503(tmp_path: Path) -> None:
    gateway = start_gateway(
        tmp_path / "gw",
        {"memory_budget_bytes": 1_000_000, "tiers": {"a": {"kind": "mlx", "model": MODEL}}},
    )
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            ask(gateway, "a")
        assert refused.value.status_code == 503
        assert "memory_budget_bytes" in refused.value.message
        assert gateway.http().get("/health").status_code == 200
    finally:
        gateway.stop()

"""OpenAI chat completions on the real model, through the official ``openai`` SDK."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway

pytestmark = pytest.mark.e2e
NO_EOS = {"2": -100}  # <|im_end|> never sampled: the generation runs until max_tokens
CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def test_non_streaming_answers_on_the_real_model(gateway: RunningGateway) -> None:
    completion = gateway.openai().chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=30
    )
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == MODEL
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert "Paris" in (choice.message.content or "")
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens > 10
    assert 0 < usage.completion_tokens <= 30
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_text_parts_and_alias(gateway: RunningGateway) -> None:
    completion = gateway.openai().chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "developer", "content": "You answer briefly."},
            {"role": "user", "content": [{"type": "text", "text": CAPITAL[0]["content"]}]},
        ],
        temperature=0,
        max_tokens=30,
    )
    assert completion.model == "gpt-4o-mini"
    assert "Paris" in (completion.choices[0].message.content or "")


def test_streaming_with_include_usage(gateway: RunningGateway) -> None:
    stream = gateway.openai().chat.completions.create(
        model=MODEL,
        messages=CAPITAL,
        temperature=0,
        max_tokens=30,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens


def test_stream_ends_with_done(gateway: RunningGateway) -> None:
    body = {"model": MODEL, "messages": CAPITAL, "max_tokens": 3, "stream": True}
    with gateway.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"


def test_stop_text_is_cut_and_not_included(gateway: RunningGateway) -> None:
    client = gateway.openai()
    full = client.chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=30
    )
    assert "Paris" in (full.choices[0].message.content or "")
    stopped = client.chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=30, stop=["Paris", "zzz"]
    )
    content = stopped.choices[0].message.content or ""
    assert "Paris" not in content
    assert full.choices[0].message.content.startswith(content)  # type: ignore[union-attr]
    assert stopped.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=30, stop="Paris", stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == content


def test_seed_makes_sampling_reproducible(gateway: RunningGateway) -> None:
    client = gateway.openai()
    story = [{"role": "user", "content": "Write a short poem about the sea."}]

    def sample(seed: int) -> str:
        reply = client.chat.completions.create(
            model=MODEL, messages=story, temperature=1.0, top_p=0.95, seed=seed, max_tokens=12
        )
        return reply.choices[0].message.content or ""

    first, second = sample(1234), sample(1234)
    assert first == second
    others = {sample(seed) for seed in (1, 2, 3)}
    assert len(others | {first}) > 1, "different seeds should not all give the same sample"


def test_max_tokens_one_finishes_with_length(gateway: RunningGateway) -> None:
    for field in ("max_tokens", "max_completion_tokens"):
        reply = gateway.openai().chat.completions.create(
            model=MODEL, messages=CAPITAL, temperature=0, **{field: 1}
        )
        assert reply.choices[0].finish_reason == "length"
        assert reply.usage is not None and reply.usage.completion_tokens == 1


def test_penalties_and_logit_bias_change_the_output(gateway: RunningGateway) -> None:
    client = gateway.openai()
    plain = client.chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=8
    )
    biased = client.chat.completions.create(
        model=MODEL,
        messages=CAPITAL,
        temperature=0,
        max_tokens=8,
        logit_bias={"504": 100},  # force one token everywhere
    )
    assert biased.choices[0].message.content != plain.choices[0].message.content
    penalised = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Repeat the word 'cat' twenty times."}],
        temperature=0,
        max_tokens=20,
        frequency_penalty=2.0,
    )
    assert penalised.choices[0].finish_reason in ("stop", "length")


def test_repetition_penalty_ends_a_loop_and_is_checked(gateway: RunningGateway) -> None:
    """vLLM's and mlx_lm.server's ``repetition_penalty`` (the openai SDK sends it in
    extra_body): SmolLM2 asked to repeat an emoji loops on it until max_tokens; penalized,
    it writes something else (the tokens themselves: tests/unit/engines/test_repetition_penalty.py)."""
    client = gateway.openai()
    loop = [{"role": "user", "content": "Repeat after me: " + "\U0001f680" * 20}]
    plain = client.chat.completions.create(model=MODEL, messages=loop, temperature=0, max_tokens=48)
    penalized = client.chat.completions.create(
        model=MODEL,
        messages=loop,
        temperature=0,
        max_tokens=48,
        extra_body={"repetition_penalty": 1.3},
    )
    assert plain.choices[0].message.content == "\U0001f680" * 16
    assert penalized.choices[0].message.content != plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(
            model=MODEL, prompt="a", max_tokens=1, extra_body={"repetition_penalty": 0}
        )
    assert refused.value.body["param"] == "repetition_penalty"  # type: ignore[index]


def test_models_endpoint_lists_ids_and_aliases(gateway: RunningGateway) -> None:
    client = gateway.openai()
    ids = [m.id for m in client.models.list()]
    assert MODEL in ids and "gpt-4o-mini" in ids
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_health_shows_the_compute_path(gateway: RunningGateway) -> None:
    health = httpx.get(f"{gateway.base_url}/health").json()
    assert health["status"] == "ok"
    assert health["compute"]["device"] in ("cpu", "metal")
    assert health["compute"]["weights"] in ("4bit", "float32")
    assert MODEL in health["models"]


def test_openapi_schema_describes_every_endpoint(gateway: RunningGateway) -> None:
    schema = httpx.get(f"{gateway.base_url}/schema/openapi.json").json()
    paths = schema["paths"]
    for path in ("/v1/chat/completions", "/v1/models", "/v1/models/{model}", "/health", "/metrics"):
        assert path in paths, path
    request = paths["/v1/chat/completions"]["post"]["requestBody"]
    assert request["required"] is True
    assert "400" in paths["/v1/chat/completions"]["post"]["responses"]


def test_dropped_stream_frees_the_slot_at_once(gateway: RunningGateway) -> None:
    client = gateway.openai()
    long_story = [{"role": "user", "content": "Tell me a very long story about dragons."}]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=long_story,
        max_tokens=2000,
        temperature=0.7,
        stream=True,
        logit_bias=NO_EOS,
    )
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
        if received >= 3:
            break
    stream.close()
    dropped_at = time.monotonic()
    # Within about a token the slot is empty again (a token here is well under a second).
    while gateway.scheduler()["slot"] is not None:
        assert time.monotonic() - dropped_at < 5, "generation kept running after the client left"
        time.sleep(0.05)
    reply = client.chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=20
    )
    assert "Paris" in (reply.choices[0].message.content or "")
    assert time.monotonic() - dropped_at < 15
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    assert 'gateway_cancellations_total{priority="user",stage="running"}' in metrics


def test_dropped_non_streaming_request_is_cancelled(gateway: RunningGateway) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count to 1000."}],
        "max_tokens": 2000,
        "logit_bias": NO_EOS,
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=2.0)
    left_at = time.monotonic()
    while gateway.scheduler()["slot"] is not None:
        assert time.monotonic() - left_at < 5, "non-streaming generation kept running"
        time.sleep(0.05)


def test_max_tokens_cuts_the_same_text_short(gateway: RunningGateway) -> None:
    client = gateway.openai()

    def text(limit: int) -> str:
        reply = client.chat.completions.create(
            model=MODEL, messages=CAPITAL, temperature=0, max_tokens=limit
        )
        return reply.choices[0].message.content or ""

    three, four, full = text(3), text(4), text(30)
    assert full.startswith(four) and four.startswith(three)
    assert len(three) < len(four), "the last allowed token's text must not be dropped"


def test_a_long_prefill_streams_keep_alive_pings(gateway: RunningGateway) -> None:
    """While a long prompt is prefilled nothing is written but ``: ping`` comments every 10 s
    (proxies and clients with read timeouts keep the stream). The prefill reports each chunk
    inside the gateway, which the chat stream swallows: the ping is due 10 s after the last
    write, however many chunks went by (it never came before, the chunks restarting its
    timer). Background priority after a user's request: small chunks, so leaving costs
    little; ~6,000 tokens: far longer than 10 s on a CPU."""
    client = gateway.openai()
    client.chat.completions.create(model=MODEL, messages=CAPITAL, max_tokens=1)
    log = " ".join(f"line {i}: request served in {i % 97} ms;" for i in range(450))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Summarize log {time.time_ns()}. {log}"}],
        "max_tokens": 8,
        "stream": True,
    }
    headers = {"X-Gateway-Priority": "background"}
    seen: list[tuple[float, str]] = []
    with (
        httpx.Client(base_url=gateway.base_url, timeout=60) as http,
        http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        started = time.monotonic()
        for line in response.iter_lines():
            if line:
                seen.append((time.monotonic() - started, line))
            if line == ": ping" or ('"content":"' in line and '"content":""' not in line):
                break
    assert seen[-1][1] == ": ping", f"a token before any ping: {seen[-1]}"
    assert 8 < seen[-1][0] < 14
    left = time.monotonic()
    while gateway.scheduler()["slot"] is not None:  # the prefill stops with the client
        assert time.monotonic() - left < 10, "the prefill went on after the client left"
        time.sleep(0.05)

"""Speculative decoding end to end: one gateway, the embedded SmolLM2 in three tiers (prompt
lookup, the default; speculation off; a draft model, here the model itself), asked the same
things through the openai SDK under greedy decoding. Every answer is the same in the three,
and the drafted ones say so in ``usage`` and ``/metrics``: a copying reply, a forced tool
call, a JSON-schema reply, streamed log-probabilities, and a background job preempted by a
user request and resumed. (``test_speculation.py`` is another feature: a typing hint's
speculative first tokens.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testsupport.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"
TIERS = ("lookup", "plain", "drafted")
LINES = "\n".join(f"record_{n} = load_record({n}, shard={n % 4})" for n in range(14))
COPY = [
    {"role": "system", "content": "You repeat text exactly as given."},
    {"role": "user", "content": f"Repeat these lines exactly:\n{LINES}"},
]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(
        tmp_path_factory.mktemp("speculative"),
        {
            "tiers": {
                "lookup": {"kind": "mlx", "model": MODEL, "preload": True},
                "plain": {"kind": "mlx", "model": MODEL, "speculation": "off"},
                "drafted": {"kind": "mlx", "model": MODEL, "draft_model": MODEL},
            },
        },
    )
    yield running
    running.stop()


def accepted_total(gateway: RunningGateway, tier: str) -> float:
    text = httpx.get(f"{gateway.base_url}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "gateway_speculative_accepted_tokens":
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total") and s.labels["tier"] == tier
            )
    return 0.0


def ask_all(gateway: RunningGateway, **request: Any) -> dict[str, Any]:
    client = gateway.openai()
    return {
        tier: client.chat.completions.create(model=tier, temperature=0, **request) for tier in TIERS
    }


def accepted(reply: Any) -> int:
    details = reply.usage.completion_tokens_details
    return int(details.accepted_prediction_tokens or 0) if details else 0


def drafted(reply: Any) -> int:
    """Tokens drafted for the reply, accepted or not. (A draft model guesses without the
    request's grammar, so under one its guesses may be refused where the grammar forces
    another token: that they were made and verified is what is checked.)"""
    details = reply.usage.completion_tokens_details
    return accepted(reply) + int(details.rejected_prediction_tokens or 0) if details else 0


def test_a_copying_reply_is_the_same_and_mostly_drafted(gateway: RunningGateway) -> None:
    replies = ask_all(gateway, messages=COPY, max_tokens=120)
    texts = {tier: r.choices[0].message.content for tier, r in replies.items()}
    assert texts["lookup"] == texts["plain"] == texts["drafted"]
    assert "record_3 = load_record(3" in texts["plain"]
    assert accepted(replies["plain"]) == 0
    assert accepted(replies["lookup"]) > 30
    # The model as its own draft: every guess right, but guessing costs as much as the model
    # (it pays nowhere): drafting rests after each draft, yet each request drafts first.
    assert accepted(replies["drafted"]) >= 4
    assert accepted_total(gateway, "lookup") >= accepted(replies["lookup"])
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    assert 'gateway_speculative_drafted_tokens_total{method="draft_model",tier="drafted"}' in (
        metrics
    )
    health = httpx.get(f"{gateway.base_url}/health").json()["tiers"]
    assert health["lookup"]["speculation"] == "lookup"
    assert health["plain"]["speculation"] == "off"
    assert health["drafted"]["speculation"] == f"draft_model {MODEL}"


def test_a_forced_tool_call_is_the_same(gateway: RunningGateway) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "save_lines",
            "description": "Save lines of code to a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    }
    messages = [
        {"role": "user", "content": f"Save these lines to records.py:\n{LINES}"},
    ]
    replies = ask_all(
        gateway, messages=messages, tools=[tool], tool_choice="required", max_tokens=160
    )
    calls = {}
    for tier, reply in replies.items():
        choice = reply.choices[0]
        assert choice.finish_reason in ("tool_calls", "length"), tier
        call = choice.message.tool_calls[0]
        calls[tier] = (call.function.name, call.function.arguments)
    assert calls["lookup"] == calls["plain"] == calls["drafted"]
    assert calls["plain"][0] == "save_lines"
    if replies["plain"].choices[0].finish_reason == "tool_calls":
        assert set(json.loads(calls["plain"][1])) >= {"path", "content"}
    assert drafted(replies["drafted"]) >= 4


def test_a_json_schema_reply_is_the_same_and_valid(gateway: RunningGateway) -> None:
    schema = {
        "type": "object",
        "properties": {"records": {"type": "array", "items": {"type": "string"}}},
        "required": ["records"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": f"List these lines as JSON records:\n{LINES}"}]
    replies = ask_all(
        gateway,
        messages=messages,
        max_tokens=200,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "records", "schema": schema, "strict": True},
        },
    )
    texts = {tier: r.choices[0].message.content for tier, r in replies.items()}
    assert texts["lookup"] == texts["plain"] == texts["drafted"]
    if replies["plain"].choices[0].finish_reason == "stop":
        jsonschema.validate(json.loads(texts["plain"]), schema)
    # (Prompt lookup drafts here only where it measures a gain: timing, not asserted.)
    assert drafted(replies["drafted"]) >= 4


def streamed(gateway: RunningGateway, tier: str) -> tuple[list[tuple[str, float]], Any]:
    stream = gateway.openai().chat.completions.create(
        model=tier,
        messages=COPY,
        max_tokens=60,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    tokens, usage = [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.logprobs and choice.logprobs.content:
                tokens.extend((t.token, t.logprob) for t in choice.logprobs.content)
    return tokens, usage


def test_streamed_logprobs_are_the_same(gateway: RunningGateway) -> None:
    plain, _ = streamed(gateway, "plain")
    for tier in ("lookup", "drafted"):
        drafted, usage = streamed(gateway, tier)
        assert [t for t, _ in drafted] == [t for t, _ in plain], tier
        for (_, a), (_, b) in zip(drafted, plain, strict=True):
            assert a == pytest.approx(b, abs=1e-3)
        assert usage.completion_tokens_details.accepted_prediction_tokens > 0


def preemptions(gateway: RunningGateway) -> float:
    text = httpx.get(f"{gateway.base_url}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "gateway_preemptions":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


def background_copy(gateway: RunningGateway, on_chunk: Any = None) -> str:
    stream = gateway.openai().chat.completions.create(
        model="lookup",
        messages=COPY,
        max_tokens=100,
        temperature=0,
        stream=True,
        extra_body={"priority": "background"},
    )
    parts = []
    for index, chunk in enumerate(stream):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if on_chunk is not None:
            on_chunk(index)
    return "".join(parts)


def test_a_preempted_drafting_background_job_resumes_with_the_same_text(
    gateway: RunningGateway,
) -> None:
    # A user was here lately: background passes are computed in groups of layers, so the
    # user below cuts in inside a verifying pass or between passes.
    gateway.openai().chat.completions.create(
        model="lookup", messages=[{"role": "user", "content": "Hi"}], max_tokens=1
    )
    reference = background_copy(gateway)
    before_preempted, before_accepted = preemptions(gateway), accepted_total(gateway, "lookup")
    threads: list[threading.Thread] = []
    answers: list[str] = []

    def interrupt(index: int) -> None:
        if index == 6:

            def ask() -> None:
                reply = gateway.openai().chat.completions.create(
                    model="lookup",
                    messages=[{"role": "user", "content": "What is the capital of France?"}],
                    max_tokens=12,
                    temperature=0,
                )
                answers.append(reply.choices[0].message.content or "")

            thread = threading.Thread(target=ask)
            thread.start()
            threads.append(thread)

    resumed = background_copy(gateway, interrupt)
    for thread in threads:
        thread.join()
    assert answers and answers[0]
    assert preemptions(gateway) >= before_preempted + 1, "the background job was not preempted"
    assert resumed == reference
    assert accepted_total(gateway, "lookup") > before_accepted

"""Legacy ``/v1/completions`` and log-probabilities through the unmodified ``openai`` SDK."""

from __future__ import annotations

import json
import math

import openai
import pytest

from testsupport.process import RunningGateway

PROMPT = "The capital of France is"


def test_a_text_completion_continues_the_raw_prompt(gateway: RunningGateway) -> None:
    client = gateway.openai()
    completion = client.completions.create(
        model="gpt-4o-mini", prompt=PROMPT, max_tokens=8, temperature=0
    )
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    choice = completion.choices[0]
    assert choice.text and choice.finish_reason in ("stop", "length")
    # No chat template: the prompt's tokens are the text's own.
    assert completion.usage is not None and completion.usage.prompt_tokens < 10
    echoed = client.completions.create(
        model="gpt-4o-mini", prompt=[PROMPT], max_tokens=8, temperature=0, echo=True
    )
    assert echoed.choices[0].text == PROMPT + choice.text


def test_a_streamed_completion_equals_the_whole_one(gateway: RunningGateway) -> None:
    client = gateway.openai()
    fields = {"model": "gpt-4o-mini", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}
    whole = client.completions.create(**fields)  # type: ignore[call-overload]
    chunks = list(
        client.completions.create(
            **fields, stream=True, echo=True, stream_options={"include_usage": True}
        )  # type: ignore[call-overload]
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == PROMPT + whole.choices[0].text
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_completion_logprobs_in_the_legacy_shape(gateway: RunningGateway) -> None:
    completion = gateway.openai().completions.create(
        model="gpt-4o-mini", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs
    assert "".join(logprobs.tokens) == completion.choices[0].text
    assert logprobs.text_offset == [
        sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(logprobs.tokens))
    ]
    for chosen, top in zip(logprobs.token_logprobs, logprobs.top_logprobs or [], strict=True):
        assert len(top) == 3
        # Greedy: the chosen token is the most likely one.
        assert chosen == pytest.approx(max(top.values()), abs=1e-5)
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5


def test_refusals_of_the_legacy_endpoint(gateway: RunningGateway) -> None:
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as suffix:
        client.completions.create(model="gpt-4o-mini", prompt="def f(", suffix="return 1")
    assert "suffix" in suffix.value.message
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="gpt-4o-mini", prompt=["a", "b"])
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="gpt-4o-mini", prompt="a", echo=True, logprobs=1)


def test_chat_logprobs_greedy_top_choice_is_the_token(gateway: RunningGateway) -> None:
    client = gateway.openai()
    fields = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 12,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }
    completion = client.chat.completions.create(**fields)  # type: ignore[call-overload]
    choice = completion.choices[0]
    content = choice.logprobs.content
    assert content and "".join(t.token for t in content) == choice.message.content
    assert b"".join(bytes(t.bytes) for t in content).decode() == choice.message.content
    for entry in content:
        assert len(entry.top_logprobs) == 5
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-6)
        assert entry.logprob <= 0
        assert sum(math.exp(t.logprob) for t in entry.top_logprobs) <= 1 + 1e-5
        ordered = [t.logprob for t in entry.top_logprobs]
        assert ordered == sorted(ordered, reverse=True)
    streamed = [
        entry
        for chunk in client.chat.completions.create(**fields, stream=True)  # type: ignore[call-overload]
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content or []
    ]
    # Same tokens; log-probabilities equal up to float noise (the second run's prompt comes
    # from the prefix cache, computed in other chunks: rounding to 4 places was flaky).
    assert [t.token for t in streamed] == [t.token for t in content]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in content], abs=1e-3)


def test_logprobs_under_a_grammar_are_those_after_the_mask(gateway: RunningGateway) -> None:
    completion = gateway.openai().chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "schema": {
                    "type": "object",
                    "properties": {"answer": {"type": "boolean"}},
                    "required": ["answer"],
                },
            },
        },
        max_tokens=20,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    json.loads(completion.choices[0].message.content or "")
    first = completion.choices[0].logprobs.content[0]  # type: ignore[union-attr,index]
    # Only "{" can open the object: after the mask it holds all of the probability.
    assert first.token.startswith("{") and first.logprob == pytest.approx(0.0, abs=1e-4)
    # The masked alternatives: OpenAI's -9999 for "cannot be chosen".
    assert [t.logprob for t in first.top_logprobs[1:]] == [-9999.0, -9999.0]

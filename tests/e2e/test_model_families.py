"""Model families as their templates expect, through the unmodified ``openai`` and ``anthropic``
SDKs: one gateway, two tiers of random-weight models (``testsupport.synthetic``) whose
tokenizers have each family's special tokens and whose templates are the families' real ones
(``tests/fixtures/templates``):

* ``qwen3``: Qwen3's template (``enable_thinking``, ``<think>``, ``<tool_call>`` with newlines);
* ``mistral``: Mistral-Nemo-Instruct-2407's (``[TOOL_CALLS][...]``, 9-character call ids).

A random model never ends its reasoning by itself: a thinking budget forces the end marker,
which is also what the budget is for. Tool arguments are bounded (string lengths, enums) so
that a random model finishes its calls; every call must match its schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import pytest

from testsupport.process import RunningGateway, start_gateway
from testsupport.synthetic import SyntheticSpec, build_synthetic

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "templates"
QWEN_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
MISTRAL_TOKENS = (
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
}
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather", "parameters": PARAMETERS},
}
ASK = [{"role": "user", "content": "Weather in Paris for three days?"}]
BUDGET = 4  # reasoning tokens before the end marker is forced
CALLS_EACH = 10


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    models = tmp_path_factory.mktemp("families")
    qwen3 = build_synthetic(
        SyntheticSpec(
            "qwen3",
            extra_special_tokens=QWEN_TOKENS,
            chat_template=(TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(),
        ),
        models / "qwen3",
    )
    mistral = build_synthetic(
        SyntheticSpec(
            "mistral",
            extra_special_tokens=MISTRAL_TOKENS,
            chat_template=(TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text(),
        ),
        models / "mistral",
    )
    tiers = {
        "qwen3": {"kind": "mlx", "model": str(qwen3)},
        "mistral": {"kind": "mlx", "model": str(mistral)},
    }
    running = start_gateway(tmp_path_factory.mktemp("gateway"), {"tiers": tiers})
    yield running
    running.stop()


def reasoning_of(message: Any) -> str | None:
    return getattr(message, "reasoning_content", None)


def test_reasoning_arrives_apart_from_the_answer(gw: RunningGateway) -> None:
    client = gw.openai()
    asked: dict[str, Any] = {
        "model": "qwen3",
        "messages": ASK,
        "max_tokens": 20,
        "seed": 3,
        "extra_body": {"thinking_token_budget": BUDGET},
    }
    whole = client.chat.completions.create(**asked)
    message = whole.choices[0].message
    reasoning = reasoning_of(message)
    assert isinstance(reasoning, str)
    assert message.content and "<think>" not in message.content
    assert "</think>" not in message.content and "</think>" not in reasoning
    # <think>, at most BUDGET tokens, </think>: all counted in max_tokens.
    details = whole.usage.completion_tokens_details
    assert details is not None and 2 <= details.reasoning_tokens <= BUDGET + 2
    assert whole.usage.completion_tokens == 20

    # Streamed with the same seed: the same reasoning, every piece of it before the answer.
    kinds, streamed_reasoning, streamed_content = [], [], []
    for chunk in client.chat.completions.create(**asked, stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and reasoning_of(delta):
            kinds.append("reasoning")
            streamed_reasoning.append(reasoning_of(delta))
        if delta is not None and delta.content:
            kinds.append("content")
            streamed_content.append(delta.content)
    assert "".join(streamed_reasoning) == reasoning and "".join(streamed_content) == message.content
    assert kinds.index("content") > max(i for i, k in enumerate(kinds) if k == "reasoning")


def test_reasoning_effort_none_switches_thinking_off(gw: RunningGateway) -> None:
    completion = gw.openai().chat.completions.create(
        model="qwen3", messages=ASK, max_tokens=8, seed=1, reasoning_effort="none"
    )
    message = completion.choices[0].message
    assert not reasoning_of(message) and message.content
    details = completion.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens == 0


def test_a_model_that_does_not_think_has_no_reasoning_fields(gw: RunningGateway) -> None:
    completion = gw.openai().chat.completions.create(
        model="mistral", messages=ASK, max_tokens=6, seed=1, reasoning_effort="high"
    )
    assert reasoning_of(completion.choices[0].message) is None
    assert completion.usage.completion_tokens_details is None


def test_anthropic_thinking_blocks(gw: RunningGateway) -> None:
    sdk = anthropic.Anthropic(base_url=gw.base_url, api_key="local", max_retries=0)
    asked: dict[str, Any] = {
        "model": "qwen3",
        "max_tokens": 20,
        "messages": ASK,
        "thinking": {"type": "enabled", "budget_tokens": BUDGET},
    }
    message = sdk.messages.create(**asked)
    thinking, *rest = message.content
    assert thinking.type == "thinking" and thinking.signature
    assert rest and all(block.type == "text" for block in rest)

    with sdk.messages.stream(**asked) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature
    assert "thinking" in events and "signature" in events  # the SDK's own event names

    # A reply sent back with its thinking block: accepted, and left out of the prompt.
    again = sdk.messages.create(
        **{
            **asked,
            "messages": [
                *ASK,
                {"role": "assistant", "content": [block.model_dump() for block in message.content]},
                {"role": "user", "content": "And tomorrow?"},
            ],
        }
    )
    assert again.content[0].type == "thinking"


@pytest.mark.parametrize("tier", ["qwen3", "mistral"])
def test_required_tool_calls_in_the_models_own_format_match_their_schema(
    gw: RunningGateway, tier: str
) -> None:
    client = gw.openai()
    valid = 0
    for seed in range(CALLS_EACH):
        completion = client.chat.completions.create(
            model=tier,
            messages=ASK,
            tools=[WEATHER],
            tool_choice="required",
            temperature=1.0,
            seed=seed,
            max_tokens=120,
            extra_body={"thinking_token_budget": BUDGET},
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        for call in choice.message.tool_calls or []:
            assert call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)
            valid += 1
    assert valid == CALLS_EACH

    # Streamed: the SDK accumulates the same kind of call.
    with client.beta.chat.completions.stream(
        model=tier,
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",
        seed=99,
        max_tokens=120,
        extra_body={"thinking_token_budget": BUDGET},
    ) as stream:
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)


@pytest.mark.parametrize("tier", ["qwen3", "mistral"])
def test_anthropic_tool_use_blocks_and_the_history_round_trip(
    gw: RunningGateway, tier: str
) -> None:
    sdk = anthropic.Anthropic(base_url=gw.base_url, api_key="local", max_retries=0)
    tool = {"name": "get_weather", "description": "Weather", "input_schema": PARAMETERS}
    asked: dict[str, Any] = {
        "model": tier,
        "max_tokens": 120,
        "tools": [tool],
        "tool_choice": {"type": "any"},
        "messages": ASK,
        "thinking": {"type": "enabled", "budget_tokens": BUDGET},
    }
    message = sdk.messages.create(**asked)
    assert message.stop_reason == "tool_use"
    uses = [block for block in message.content if block.type == "tool_use"]
    assert uses and uses[0].id.startswith("toolu_")
    jsonschema.validate(uses[0].input, PARAMETERS)
    # The call and its result go back (Mistral's template wants 9-character ids: mapped).
    history = [
        *ASK,
        {"role": "assistant", "content": [block.model_dump() for block in message.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}],
        },
    ]
    after = sdk.messages.create(**{**asked, "tool_choice": {"type": "auto"}, "messages": history})
    assert after.stop_reason in ("tool_use", "end_turn", "max_tokens")


def test_openai_history_with_reasoning_and_calls_is_accepted(gw: RunningGateway) -> None:
    client = gw.openai()
    for tier in ("qwen3", "mistral"):
        first = client.chat.completions.create(
            model=tier,
            messages=ASK,
            tools=[WEATHER],
            tool_choice="required",
            seed=5,
            max_tokens=120,
            extra_body={"thinking_token_budget": BUDGET},
        )
        reply = first.choices[0].message
        (call,) = reply.tool_calls or []
        history = [
            *ASK,
            reply.model_dump(exclude_none=True),  # reasoning_content included, as SDKs send it
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ]
        second = client.chat.completions.create(
            model=tier, messages=history, tools=[WEATHER], max_tokens=8, seed=5
        )
        assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
        # The conversation so far comes from the prefix cache.
        details = second.usage.prompt_tokens_details
        assert details is not None and (details.cached_tokens or 0) > 0

"""OpenAI's Responses API on the real model, through the libraries people use, each as its own
documentation shows it: openai (create, stream, parse, function tools, previous_response_id
across a restart), the OpenAI Agents SDK, langchain-openai, pydantic-ai and litellm."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
import openai
import pytest
from pydantic import BaseModel

from testsupport.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"
KEY = "local"  # any key: the gateway has none set
LIBRARIAN = "You are the reference librarian of a maritime museum. Answer briefly. " * 8
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the weather forecast for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@dataclass
class Node:
    """One gateway whose responses and prefix caches live in ``workdir`` (so a restart
    keeps them)."""

    workdir: Path
    gateway: RunningGateway

    @property
    def base_url(self) -> str:
        return f"{self.gateway.base_url}/v1"

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=KEY, max_retries=0, timeout=120)

    def restart(self) -> None:
        self.gateway.stop()
        self.gateway = _start(self.workdir)


def _start(workdir: Path) -> RunningGateway:
    return start_gateway(workdir, {"responses": {"path": str(workdir / "responses.sqlite3")}})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    workdir = tmp_path_factory.mktemp("responses")
    running = Node(workdir, _start(workdir))
    yield running
    running.gateway.stop()


# -- openai ------------------------------------------------------------------------------------


def test_openai_create_and_retrieve(node: Node) -> None:
    client = node.client()
    response = client.responses.create(
        model=MODEL,
        instructions="Answer in one short sentence.",
        input="What is the capital of France?",
        max_output_tokens=24,
        temperature=0,
        metadata={"test": "create"},
    )
    assert response.status in ("completed", "incomplete")
    assert response.output_text.strip()
    assert response.usage is not None and response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text and again.metadata == {"test": "create"}
    items = client.responses.input_items.list(response.id)
    assert [item.type for item in items.data] == ["message"]
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_openai_stream_helper_accepts_every_event(node: Node) -> None:
    with node.client().responses.stream(
        model=MODEL, input="Tell me a joke.", max_output_tokens=24, temperature=0
    ) as stream:
        kinds = [event.type for event in stream]
        deltas = [k for k in kinds if k == "response.output_text.delta"]
        if kinds[-1] == "response.completed":
            final = stream.get_final_response()
            assert final.output_text
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert deltas and kinds[-1] in ("response.completed", "response.incomplete")


class Label(BaseModel):
    label: Literal["positive", "negative"]
    confidence: float


def test_openai_parse_with_a_pydantic_model(node: Node) -> None:
    response = node.client().responses.parse(
        model=MODEL,
        input="Classify the sentiment: I love this museum!",
        text_format=Label,
        max_output_tokens=64,
        temperature=0,
    )
    assert isinstance(response.output_parsed, Label)


def test_openai_function_tools_required_then_the_result_back(node: Node) -> None:
    client = node.client()
    first = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        max_output_tokens=48,
        temperature=0,
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and "city" in json.loads(call.arguments)
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 22 C"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",  # an answer now (given the choice, a 135M model calls again)
        max_output_tokens=24,
        temperature=0,
    )
    assert second.output_text.strip()
    # The stored turn (prompt and answer) was still in the prefix cache.
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens > 0


def test_a_typing_hint_warms_a_stored_conversation(node: Node) -> None:
    client = node.client()
    first = client.responses.create(
        model=MODEL, instructions=LIBRARIAN, input="Which ships do you have?", max_output_tokens=8
    )
    hint = httpx.post(
        f"{node.base_url}/typing",
        json={"model": MODEL, "previous_response_id": first.id, "instructions": LIBRARIAN},
    ).json()
    url = f"{node.base_url}/typing/{hint['id']}"
    deadline = time.monotonic() + 30
    while httpx.get(url).json()["state"] in ("queued", "computing"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = client.responses.create(
        model=MODEL,
        instructions=LIBRARIAN,
        previous_response_id=first.id,
        input="And maps?",
        max_output_tokens=8,
    )
    assert httpx.get(url).json()["state"] == "used"  # the request matched the hint's tokens
    assert second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens >= hint["prefix_tokens"] - 4


# -- the OpenAI Agents SDK ---------------------------------------------------------------------


def test_agents_sdk_runs_a_forced_tool(node: Node) -> None:
    from agents import (
        Agent,
        ModelSettings,
        Runner,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )

    set_default_openai_client(openai.AsyncOpenAI(base_url=node.base_url, api_key=KEY))
    set_tracing_disabled(True)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather forecast for a city."""
        asked.append(city)
        return f"Sunny in {city}"

    agent = Agent(
        name="Assistant",
        instructions="You answer questions about the weather.",
        model=MODEL,
        tools=[get_weather],
        model_settings=ModelSettings(tool_choice="required", max_tokens=48, temperature=0),
        tool_use_behavior="stop_on_first_tool",
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=3))
    assert asked, "the tool was not called"
    assert result.final_output == f"Sunny in {asked[0]}"


# -- langchain-openai, pydantic-ai, litellm ---------------------------------------------------


def test_langchain_openai_with_the_responses_api(node: Node) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=MODEL,
        base_url=node.base_url,
        api_key=KEY,  # type: ignore[arg-type]
        use_responses_api=True,
        max_tokens=24,  # type: ignore[call-arg]
        temperature=0,
    )
    assert llm.invoke("What is the capital of France?").text.strip()
    structured = llm.with_structured_output(Label, method="json_schema")
    assert isinstance(structured.invoke("Classify the sentiment: I love it!"), Label)


def test_pydantic_ai_responses_model(node: Node) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIResponsesModel(
        MODEL, provider=OpenAIProvider(base_url=node.base_url, api_key=KEY)
    )
    agent = Agent(model, instructions="Answer in one short sentence.")
    result = agent.run_sync(
        "What is the capital of France?", model_settings={"max_tokens": 24, "temperature": 0}
    )
    assert isinstance(result.output, str) and result.output.strip()


def test_litellm_responses(node: Node) -> None:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no download of its price list
    import litellm

    response = litellm.responses(
        model=f"openai/{MODEL}",
        input="What is the capital of France?",
        api_base=node.base_url,
        api_key=KEY,
        max_output_tokens=24,
        temperature=0,
    )
    texts = [
        part.text
        for item in response.output
        if getattr(item, "type", None) == "message"
        for part in item.content  # type: ignore[union-attr]
    ]
    assert "".join(texts).strip()


# -- a client that leaves ---------------------------------------------------------------------


def _slot_empties(node: Node, since: float) -> None:
    while node.gateway.scheduler()["slot"] is not None:
        assert time.monotonic() - since < 5, "generation kept running after the client left"
        time.sleep(0.05)


def test_a_dropped_stream_or_request_stops_its_generation(node: Node) -> None:
    story = "Tell me a very long story about dragons."
    with node.client().responses.stream(
        model=MODEL, input=story, max_output_tokens=2000, temperature=0.7
    ) as stream:
        deltas = 0
        for event in stream:
            deltas += event.type == "response.output_text.delta"
            if deltas >= 3:
                break
    _slot_empties(node, time.monotonic())
    body = {"model": MODEL, "input": story, "max_output_tokens": 2000, "temperature": 0.7}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{node.base_url}/responses", json=body, timeout=2.0)
    _slot_empties(node, time.monotonic())


# -- a conversation continued after a restart (last: it restarts the gateway) ------------------


def test_previous_response_id_across_a_restart_reuses_the_saved_cache(node: Node) -> None:
    first = node.client().responses.create(
        model=MODEL,
        instructions=LIBRARIAN,
        input="Which ships do you have?",
        max_output_tokens=6,
        temperature=0,
    )
    node.restart()  # the prefix caches are saved at shutdown, the responses are in SQLite
    client = node.client()
    assert client.responses.retrieve(first.id).output_text == first.output_text
    second = client.responses.create(
        model=MODEL,
        instructions=LIBRARIAN,  # instructions are not carried over, as OpenAI's
        previous_response_id=first.id,
        input="And maps of the Baltic?",
        max_output_tokens=6,
        temperature=0,
    )
    assert second.usage is not None
    first_prompt = first.usage.input_tokens if first.usage else 0
    assert second.usage.input_tokens > first_prompt  # the stored turn came first
    assert second.usage.input_tokens_details.cached_tokens > 0
    assert "loaded from disk" in node.gateway.log()

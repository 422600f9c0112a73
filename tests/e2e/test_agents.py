"""Agents out of the box (issue 30), each through its own real client against the real gateway:
OpenAI's Codex CLI (its npm package, pinned) with its default tools, Anthropic's tool runners
(Python and Node) in their default, threaded mode, the OpenAI Agents SDK with a function tool,
Responses namespace tools and hosted tools through the openai SDK, streams that open before a
long prefill, and a forced call whose max_tokens is its arguments' own length.

The agents' gateway is what a user running them would configure: hosted tools they offer by
default are left out (``responses.unsupported_tools = "drop"``), and the tier samples greedily
where a request sets no temperature (Codex sends none): a 135M model then makes the same
call every run. Its repetition penalty (1.1, Ollama's default) keeps that model out of the
loops it otherwise falls into: Codex's prompt names its working folder, and with pytest's
(longer) one SmolLM2 answered "say hi" with one emoji until the context ran out. The npm clients are installed by ``make test`` (``ops/ensure-agent-clients.sh``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2  # what anthropic's SDK is built on
import openai
import pytest

from testsupport.process import RunningGateway, start_gateway
from testsupport.prompts import uncached_prompt

MODEL = "smollm2-135m-instruct"
CLIENTS = Path(__file__).resolve().parents[2] / ".cache" / "agent-clients"
CODEX = CLIENTS / "node_modules" / ".bin" / "codex"
NODE_SDK = CLIENTS / "node_modules" / "@anthropic-ai" / "sdk"
# Codex's own base instructions (17K characters) do not fit SmolLM2's 8K context with its
# tools; its documented model_instructions_file replaces them. Every tool stays offered.
CODEX_INSTRUCTIONS = "You are a coding agent. Use exec_command to run shell commands. Be brief.\n"
REPEAT = 1.1
CALL_PROMPT = "Respond with a <tool_call> of exec_command to run echo hi."


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    folder = tmp_path_factory.mktemp("agents")
    config = {
        "responses": {"unsupported_tools": "drop", "path": str(folder / "chains.sqlite3")},
        "tiers": {"default": {"model": MODEL, "temperature": 0.0, "repetition_penalty": REPEAT}},
    }
    running = start_gateway(folder, config)
    yield running
    running.stop()


def ok_requests(gateway: RunningGateway) -> float:
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("gateway_tier_requests_total{") and 'outcome="ok"' in line
    )


def test_the_tier_s_repetition_penalty_applies_where_a_request_sets_none(
    agents: RunningGateway,
) -> None:
    client = agents.openai()
    # A reply that repeats itself, where 1.1 changes a greedy choice (on a loop of one
    # emoji it does not within 48 tokens; on Codex's "say hi" it does).
    twice = [{"role": "user", "content": "List the days of the week, twice."}]

    def reply(**penalty: float) -> str | None:
        completion = client.chat.completions.create(
            model=MODEL, messages=twice, max_tokens=48, extra_body=penalty
        )
        return completion.choices[0].message.content

    tiers = reply()
    assert tiers == reply(repetition_penalty=REPEAT)
    assert tiers != reply(repetition_penalty=1.0)  # a request's own wins: off


# -- Codex CLI ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def codex_home(agents: RunningGateway, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CODEX.exists():
        pytest.skip("the Codex CLI is not installed (npm; make test installs it)")
    home = tmp_path_factory.mktemp("codex-home")
    (home / "instructions.md").write_text(CODEX_INSTRUCTIONS)
    # The custom-provider configuration of Codex's documentation, nothing switched off.
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "onemac"\n'
        f'model_instructions_file = "{home / "instructions.md"}"\n'
        "model_context_window = 8192\n"
        "[model_providers.onemac]\n"
        'name = "onemac-gateway"\n'
        f'base_url = "{agents.base_url}/v1"\n'
        'env_key = "ONEMAC_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return home


def codex(home: Path, prompt: str) -> subprocess.Popen[str]:
    work = home / "work"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "CODEX_HOME": str(home), "ONEMAC_API_KEY": "local"}
    return subprocess.Popen(
        [str(CODEX), "exec", "--skip-git-repo-check", "--json", prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_codex_cli_completes_a_turn_with_its_default_tools(
    agents: RunningGateway, codex_home: Path
) -> None:
    process = codex(codex_home, "say hi")
    out, err = process.communicate(timeout=600)
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    kinds = [event["type"] for event in events]
    errors = [event for event in events if event["type"] in ("error", "turn.failed")]
    assert process.returncode == 0, (kinds, errors, err[-2000:])
    assert "turn.completed" in kinds and "turn.failed" not in kinds
    messages = [e["item"] for e in events if e.get("item", {}).get("type") == "agent_message"]
    assert messages and messages[-1]["text"].strip()
    # Its first request offered the namespace and the hosted web_search: accepted, the
    # hosted tool left out and said so.
    assert "hosted tools left out: web_search" in agents.log()


def test_codex_cli_runs_a_call_and_sends_its_output_back(
    agents: RunningGateway, codex_home: Path
) -> None:
    answered_before = ok_requests(agents)
    process = codex(codex_home, CALL_PROMPT)
    ran: list[dict[str, Any]] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            event = json.loads(line)
            assert event["type"] not in ("error", "turn.failed"), event
            item = event.get("item", {})
            if event["type"] == "item.completed" and item.get("type") == "command_execution":
                ran.append(item)
            # The output went back in a second request, which was answered whole: the call
            # round-tripped. (A 135M model then calls again and again: the turn is left there.)
            if ran and ok_requests(agents) >= answered_before + 2:
                break
            if event["type"] == "turn.completed":
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert ran and "echo" in ran[0]["command"] and ran[0]["exit_code"] == 0
    assert ran[0]["aggregated_output"].strip()
    assert ok_requests(agents) >= answered_before + 2


# -- Responses: namespaces and hosted tools ----------------------------------------------------

NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "close_agent",
            "description": "Close a sub-agent.",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "string", "maxLength": 12}},
                "required": ["id"],
            },
        }
    ],
}
CHOICE = {"type": "function", "name": "close_agent", "namespace": "multi_agent_v1"}


def test_a_namespaced_call_round_trips_through_the_openai_sdk(agents: RunningGateway) -> None:
    client = agents.openai()
    request: dict[str, Any] = {
        "model": MODEL,
        "input": "Close the sub-agent named scout.",
        "tools": [NAMESPACE, {"type": "web_search"}],
        "tool_choice": CHOICE,
        "max_output_tokens": 40,
    }
    first = client.responses.create(**request)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "close_agent" and call.namespace == "multi_agent_v1"  # type: ignore[attr-defined]
    assert "id" in json.loads(call.arguments)
    assert "web_search" in first.metadata["gateway_dropped_tools"]  # type: ignore[index]
    # Streamed: the same item, named the same way in its events.
    with client.responses.stream(**request) as stream:
        added = [e.item for e in stream if e.type == "response.output_item.added"]
    assert (added[0].name, added[0].namespace) == ("close_agent", "multi_agent_v1")  # type: ignore[union-attr]
    # Its output sent back, the call continued from the stored response (with its namespace)
    # and again replayed whole as Codex does.
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "closed"}
    stored = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[output],
        tools=[NAMESPACE],
        tool_choice="none",
        max_output_tokens=8,
    )
    assert stored.status in ("completed", "incomplete") and stored.output_text
    replayed_call = {k: getattr(call, k) for k in ("type", "call_id", "name", "arguments")}
    replayed = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": request["input"]},
            {**replayed_call, "namespace": "multi_agent_v1", "id": call.id, "status": "completed"},
            {**output, "namespace": "multi_agent_v1"},
        ],
        tools=[NAMESPACE],
        tool_choice="none",
        max_output_tokens=8,
        store=False,
    )
    assert replayed.output_text


def test_hosted_tools_keep_their_400_by_default(gateway: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.openai().responses.create(
            model=MODEL, input="Find news.", tools=[{"type": "web_search"}]
        )
    error = refused.value.body  # the SDK's: the envelope's "error"
    assert isinstance(error, dict) and error["param"] == "tools[0].type"
    assert "web_search" in error["message"] and "unsupported_tools" in error["message"]


# -- streams open at once ------------------------------------------------------------------------


def first_event_and_first_token(
    client: httpx.Client, path: str, body: dict[str, Any], token_marker: str
) -> tuple[float, float, str]:
    """Seconds to the stream's first event and to its first token's, and that first line."""
    start = time.perf_counter()
    first: float | None = None
    first_line = ""
    with client.stream("POST", path, json=body, timeout=600) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if first is None and line.startswith(("event:", "data:")):
                first, first_line = time.perf_counter() - start, line
            if re.search(token_marker, line):
                return first or 0.0, time.perf_counter() - start, first_line
    raise AssertionError("no token came")


def test_every_stream_opens_before_a_long_prefill(agents: RunningGateway) -> None:
    def prompt() -> str:
        return "Summarize: " + uncached_prompt(400, seed=time.time_ns())

    cases = [
        (
            "/v1/responses",
            {"model": MODEL, "input": prompt(), "stream": True, "max_output_tokens": 2},
            "response.output_text.delta",
            "event: response.created",
        ),
        (
            "/v1/messages",
            {
                "model": MODEL,
                "max_tokens": 2,
                "stream": True,
                "messages": [{"role": "user", "content": prompt()}],
            },
            "text_delta",
            "event: message_start",
        ),
        (
            "/v1/chat/completions",
            {
                "model": MODEL,
                "max_tokens": 2,
                "stream": True,
                "messages": [{"role": "user", "content": prompt()}],
            },
            '"content":"[^"]',
            'data: {"id"',
        ),
    ]
    client = agents.http()  # one connection, as a client keeps it
    client.get("/health")
    for path, body, token, opening in cases:
        first, token_at, line = first_event_and_first_token(client, path, body, token)
        print(f"{path}: first event {first * 1000:.0f} ms, first token {token_at:.2f} s")
        assert line.startswith(opening), (path, line)
        # The opening went out at once; the prefill of ~1.5K new tokens came after it.
        assert first < token_at / 4, (path, first, token_at)


# -- a call's wrapper is not the client's to pay ------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_a_forced_call_with_max_tokens_of_its_arguments_finishes_as_a_call(
    agents: RunningGateway,
) -> None:
    client = agents.openai()
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0,
    }
    whole = client.chat.completions.create(**request, max_tokens=200, logprobs=True)
    arguments = whole.choices[0].message.tool_calls[0].function.arguments  # type: ignore[index,union-attr]
    tokens = [t.token for t in whole.choices[0].logprobs.content]  # type: ignore[union-attr]
    text = "".join(tokens)
    start = text.index('"arguments":') + len('"arguments":')
    start += len(text[start:]) - len(text[start:].lstrip())
    end = start + len(arguments)
    own, at = 0, 0
    for token in tokens:  # the tokens that write part of the arguments
        if at < end and at + len(token) > start:
            own += 1
        at += len(token)
    assert whole.usage is not None and whole.usage.completion_tokens > own + 5  # the wrapper
    exact = client.chat.completions.create(**request, max_tokens=own)
    choice = exact.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.arguments == arguments  # type: ignore[index]
    short = client.chat.completions.create(**request, max_tokens=own - 2)
    assert short.choices[0].finish_reason == "length"


# -- Anthropic's tool runners, threaded ----------------------------------------------------------


class Recorder(httpx2.BaseTransport):
    """The SDK's requests as sent; ``lose_first_continue``: the first continued turn names a
    thread the gateway never had (as after a restart with an emptied database)."""

    def __init__(self, lose_first_continue: bool = False) -> None:
        self.inner = httpx2.HTTPTransport()
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.lose = lose_first_continue

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.read())
        thread = body.get("thread") or {}
        if self.lose and thread.get("type") == "continue":
            self.lose = False
            body["thread"] = {**thread, "previous_message_id": "msg_never_stored"}
            headers = {k: v for k, v in request.headers.items() if k != "content-length"}
            request = httpx2.Request(request.method, request.url, headers=headers, json=body)
        self.bodies.append(body)
        response = self.inner.handle_request(request)
        self.statuses.append(response.status_code)
        return response


def run_python_tool_runner(gateway: RunningGateway, recorder: Recorder) -> list[Any]:
    from anthropic import beta_tool

    @beta_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city name.
        """
        return f"Sunny, 21C in {city}"

    client = anthropic.Anthropic(
        base_url=gateway.base_url,
        api_key="local",
        max_retries=0,
        http_client=httpx2.Client(transport=recorder, timeout=300),
    )
    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=48,
        system="You are a terse weather bot.",
        tools=[get_weather],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        max_iterations=4,
    )
    messages = []
    for message in runner:
        messages.append(message)
        if len(messages) == 1:  # the call is made: now an answer, from the tool's result
            runner.set_messages_params(lambda p: {**p, "tool_choice": {"type": "none"}})
    return messages


def test_the_python_tool_runner_continues_its_thread(agents: RunningGateway) -> None:
    recorder = Recorder()
    first, last = run_python_tool_runner(agents, recorder)
    assert first.stop_reason == "tool_use" and first.content[0].input == {"city": "Paris"}
    assert last.stop_reason == "end_turn" and "Sunny" in last.content[0].text
    create, follow = recorder.bodies
    assert create["thread"] == {"type": "create"}
    # Only the tool's result was sent: the system prompt, the tools and the question were
    # the thread's, and the model saw them (it answered from the result).
    assert follow["thread"] == {"type": "continue", "previous_message_id": first.id}
    assert "tools" not in follow and "system" not in follow and len(follow["messages"]) == 1
    assert recorder.statuses == [200, 200]


def test_a_lost_thread_is_replayed_by_the_sdk_itself(agents: RunningGateway) -> None:
    raw = httpx.post(
        f"{agents.base_url}/v1/messages",
        json={
            "model": MODEL,
            "max_tokens": 4,
            "messages": [],
            "thread": {"type": "continue", "previous_message_id": "msg_never_stored"},
        },
        timeout=60,
    )
    assert raw.status_code == 404
    assert raw.json()["error"]["details"] == {"error_code": "thread_not_found"}
    recorder = Recorder(lose_first_continue=True)
    messages = run_python_tool_runner(agents, recorder)
    assert messages[-1].stop_reason == "end_turn"
    assert recorder.statuses == [200, 404, 200]
    replay = recorder.bodies[2]
    assert replay["thread"] == {"type": "create"} and len(replay["messages"]) == 3


NODE_RUNNER = """
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';

const client = new Anthropic({ baseURL: process.env.BASE_URL, apiKey: 'local', maxRetries: 0 });
const getWeather = betaTool({
  name: 'get_weather',
  description: 'Get the current weather for a city.',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  run: async ({ city }) => `Sunny, 21C in ${city}`,
});
const runner = client.beta.messages.toolRunner({
  model: process.env.MODEL,
  max_tokens: 48,
  system: 'You are a terse weather bot.',
  tools: [getWeather],
  tool_choice: { type: 'tool', name: 'get_weather' },
  messages: [{ role: 'user', content: "What's the weather in Paris?" }],
  stream: process.env.STREAM === '1',
  max_iterations: 4,
});
const turns = [];
for await (const item of runner) {
  const message = process.env.STREAM === '1' ? await item.finalMessage() : await item;
  turns.push({ id: message.id, stop_reason: message.stop_reason, content: message.content });
  if (turns.length === 1) {
    // The caller owns the history once it sets the parameters: the reply goes in too.
    runner.setMessagesParams((p) => ({
      ...p,
      messages: [...p.messages, { role: message.role, content: message.content }],
      tool_choice: { type: 'none' },
    }));
  }
}
console.log(JSON.stringify(turns));
"""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_node_tool_runner_continues_its_thread(
    agents: RunningGateway, tmp_path: Path, stream: bool
) -> None:
    if not NODE_SDK.exists() or shutil.which("node") is None:
        pytest.skip("Anthropic's Node SDK is not installed (npm; make test installs it)")
    script = CLIENTS / f"runner-{os.getpid()}-{int(stream)}.mjs"  # beside its node_modules
    script.write_text(NODE_RUNNER)
    try:
        env = {
            **os.environ,
            "BASE_URL": agents.base_url,
            "MODEL": MODEL,
            "STREAM": str(int(stream)),
        }
        done = subprocess.run(
            ["node", str(script)], env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    first, last = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["stop_reason"] == "tool_use" and first["content"][0]["input"] == {"city": "Paris"}
    assert last["stop_reason"] == "end_turn" and "Sunny" in last["content"][0]["text"]


# -- the OpenAI Agents SDK -----------------------------------------------------------------------


def test_the_agents_sdk_answers_from_its_function_tool(agents: RunningGateway) -> None:
    from agents import (
        Agent,
        AgentHooks,
        ModelSettings,
        Runner,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )

    set_default_openai_client(agents.async_openai())
    set_tracing_disabled(True)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather forecast for a city."""
        asked.append(city)
        return f"Sunny in {city}"

    class AnswerAfterTheTool(AgentHooks[Any]):
        """The call is made: the next turn answers from its result."""

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: str) -> None:
            agent.model_settings = replace(agent.model_settings, tool_choice="none")

    agent = Agent(
        name="Assistant",
        instructions="You answer questions about the weather.",
        model=MODEL,
        tools=[get_weather],
        model_settings=ModelSettings(tool_choice="required", max_tokens=48, temperature=0),
        reset_tool_choice=False,
        hooks=AnswerAfterTheTool(),
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=3))
    assert asked == ["Paris"]
    assert isinstance(result.final_output, str) and result.final_output.strip()
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"]
    assert kinds[-1] == "message_output_item"

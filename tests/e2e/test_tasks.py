"""Task types and structured output over HTTP, on the real model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway, start_gateway

pytestmark = pytest.mark.e2e

DROPPED_TASK = '''
description = "Name a colour (a task type added by dropping a file)."
[sampling]
max_tokens = 16
[arguments.thing]
max_length = 100
[output]
type = "json"
schema = """{"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]}"""
[templates]
static = "You name the colour of things."
dynamic = "What colour is {{ thing }}?"
'''

PROFILES = [
    "Hi, I am Marco, 42, a baker from Naples. I love football and opera.",
    "My name is Aiko and I teach maths in Osaka.",
    "I'm 19 and I study biology. I like hiking, chess and old films.",
    "Call me Sam. I live in Leeds and fix bicycles for a living.",
    "I am a retired nurse from Lyon, 67 years old, and I garden every day.",
    "Nothing about me today, just tell me a joke.",
]
AUDITS = [
    ("The capital of France is Berlin!!!", "1. Be correct.\n2. No exclamation marks."),
    ("Water boils at 100 C at sea level.", "1. Be correct.\n2. Use one sentence."),
    ("yes", "1. Answer in a full sentence.\n2. Be polite."),
    ("Two plus two is four. It is always four. Four!", "1. Be brief.\n2. No exclamation marks."),
]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "colour.toml").write_text(DROPPED_TASK)
    # A task type naming a tier this gateway lacks: it starts anyway (and falls back).
    (folder / "elsewhere.toml").write_text(
        'tier = "no-such-tier"\n[templates]\nstatic = "Say hi."\n'
    )
    running = start_gateway(tmp_path_factory.mktemp("gw"), {"task_folders": [str(folder)]})
    yield running
    running.stop()


def run_task(gw: RunningGateway, task: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{gw.base_url}/v1/tasks/{task}", json=body, timeout=300)


def test_lists_the_shipped_task_types_and_their_hash(gw: RunningGateway) -> None:
    listing = httpx.get(f"{gw.base_url}/v1/tasks", timeout=10).json()
    ids = {t["id"] for t in listing["data"]}
    assert {"summarize", "title", "extract_profile", "audit", "chat", "colour"} <= ids
    assert listing["tasks_hash"].startswith("sha256:")
    assert httpx.get(f"{gw.base_url}/health").json()["tasks_hash"] == listing["tasks_hash"]
    audit = httpx.get(f"{gw.base_url}/v1/tasks/audit", timeout=10).json()
    assert audit["object"] == "task_type" and audit["output_schema"]["type"] == "object"
    assert {a["name"]: a["required"] for a in audit["arguments"]} == {
        "answer": True,
        "rules": True,
        "question": False,
    }
    summarize = httpx.get(f"{gw.base_url}/v1/tasks/summarize", timeout=10).json()
    assert summarize["output_schema"] is None and summarize["thinking_tag"] == "notes"


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("nope", {"args": {}}, 404, "task_type"),
        ("summarize", {"args": {}}, 422, "args.text"),
        ("summarize", {"args": {"text": "x", "extra": "y"}}, 422, "args.extra"),
        ("summarize", {"args": {"text": 5}}, 422, "args.text"),
        ("title", {"args": {"conversation": "x" * 12001}}, 422, "args.conversation"),
        ("chat", {"args": {"messages": "not json"}}, 422, "args.messages"),
        (
            "chat",
            {"args": {"messages": '[{"role": "robot", "content": "x"}]'}},
            422,
            "args.messages",
        ),
    ],
)
def test_bad_task_requests_are_clear_errors(
    gw: RunningGateway, path: str, body: dict[str, Any], status: int, param: str
) -> None:
    response = run_task(gw, path, **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"]
    if status == 404:
        assert "summarize" in error["message"]  # the known ones are listed


@pytest.fixture(scope="module")
def streamed_profile(gw: RunningGateway) -> list[dict[str, Any]]:
    """The events of one streamed extract_profile run (PROFILES[0]): the streaming test
    checks them, and its final result is one of the JSON test's runs."""
    with httpx.stream(
        "POST",
        f"{gw.base_url}/v1/tasks/extract_profile",
        json={"args": {"text": PROFILES[0]}, "stream": True},
        timeout=300,
    ) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_json_tasks_are_always_schema_valid(
    gw: RunningGateway, streamed_profile: list[dict[str, Any]]
) -> None:
    schemas = {
        t: httpx.get(f"{gw.base_url}/v1/tasks/{t}").json()["output_schema"]
        for t in ("extract_profile", "audit")
    }
    # PROFILES[0] ran streamed (the fixture): its final result is this test's first run.
    runs = [("extract_profile", {"text": text}) for text in PROFILES[1:]]
    runs += [("audit", {"answer": a, "rules": r}) for a, r in AUDITS]
    results = [streamed_profile[-1]] + [run_task(gw, task, args=args).json() for task, args in runs]
    assert len(results) >= 10
    for task, result in zip(["extract_profile"] + [t for t, _ in runs], results, strict=True):
        assert result["object"] == "task.result" and result["task_type"] == task
        assert result["finish_reason"] == "stop", result
        jsonschema.validate(result["output"], schemas[task])
        assert isinstance(result["thinking"], str)
        assert "<" not in json.dumps(result["output"])[:1]  # the tag never leaks into output


def test_streamed_task_tells_thinking_from_output(streamed_profile: list[dict[str, Any]]) -> None:
    events = streamed_profile
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "task.result"
    assert "thinking.delta" in kinds and "output.delta" in kinds
    # thinking first, then output; never interleaved
    assert kinds.index("output.delta") > max(
        i for i, k in enumerate(kinds) if k == "thinking.delta"
    )
    final = events[-1]
    output_text = "".join(e["delta"] for e in events if e["type"] == "output.delta")
    assert json.loads(output_text) == final["output"]
    thinking = "".join(e["delta"] for e in events if e["type"] == "thinking.delta")
    assert thinking.strip() == final["thinking"]


def test_text_task_and_the_static_part_is_cached(gw: RunningGateway) -> None:
    first = run_task(gw, "title", args={"conversation": "User: hi\nAssistant: hello"}).json()
    assert isinstance(first["output"], str) and first["output"]
    assert first["thinking"] is None and "\n" not in first["output"]
    second = run_task(gw, "title", args={"conversation": "User: what is MLX?"}).json()
    hint = httpx.post(  # the static part alone, as a hint warms it: its token count
        f"{gw.base_url}/v1/typing", json={"task": {"type": "title"}}, timeout=30
    ).json()
    httpx.delete(f"{gw.base_url}/v1/typing/{hint['id']}")  # (it would hold task work back)
    static = hint["prefix_tokens"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= static - 1


def test_a_dropped_in_task_type_works_without_code(gw: RunningGateway) -> None:
    result = run_task(gw, "colour", args={"thing": "the sky"}).json()
    assert result["output"]["colour"] in ("red", "green", "blue")


def test_chat_task_takes_messages_as_json(gw: RunningGateway) -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    result = run_task(gw, "chat", args={"messages": json.dumps(messages)}).json()
    assert "Paris" in result["output"]


def background_waits(gw: RunningGateway) -> tuple[float, float]:
    """(count, sum) of gateway_queue_wait_seconds for background jobs."""
    count = total = 0.0
    for line in httpx.get(f"{gw.base_url}/metrics").text.splitlines():
        if line.startswith('gateway_queue_wait_seconds_count{priority="background"}'):
            count = float(line.rsplit(" ", 1)[1])
        if line.startswith('gateway_queue_wait_seconds_sum{priority="background"}'):
            total = float(line.rsplit(" ", 1)[1])
    return count, total


def test_a_hint_naming_a_task_warms_it(gw: RunningGateway) -> None:
    # title: a background task with a short answer (the hint and its use are what is tested).
    args = {"conversation": "User: which planet has the most moons?\nAssistant: Saturn."}
    count, total = background_waits(gw)
    hint = httpx.post(
        f"{gw.base_url}/v1/typing",
        json={"task": {"type": "title", "args": args}},
        timeout=30,
    ).json()
    assert hint["object"] == "typing.hint"
    result = run_task(gw, "title", args=args).json()
    assert result["usage"]["prompt_tokens_details"]["cached_tokens"] >= hint["prefix_tokens"] - 4
    # The task is the request its hint announced: it is not held by the typing lock the hint
    # closed (typing_quiet_seconds is 2 s here; it used to wait out what was left of it).
    after_count, after_total = background_waits(gw)
    assert after_count == count + 1
    assert after_total - total < 0.5, after_total - total


# -- response_format in chat completions ---------------------------------------------------

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    },
    {
        "type": "object",
        "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["sentiment", "score"],
    },
    {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            "owner": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name"],
            },
        },
        "required": ["items", "owner"],
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_response_format_json_schema_is_always_valid(
    gw: RunningGateway, schema: dict[str, Any]
) -> None:
    reply = gw.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Answer in JSON: tell me about Paris."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        },
        max_tokens=200,
        temperature=0.7,
        seed=7,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content or ""), schema)


def test_response_format_json_object_streams_valid_json(gw: RunningGateway) -> None:
    stream = gw.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give a JSON object describing a cat."}],
        response_format={"type": "json_object"},
        max_tokens=120,
        temperature=0,
        stream=True,
    )
    text, finish = "", None
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    if finish == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # max_tokens cut it: said so, and it is a prefix of valid JSON
        assert finish == "length" and text.startswith("{")


def test_max_tokens_cutting_json_says_length(gw: RunningGateway) -> None:
    reply = gw.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe Paris in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMAS[2]}},
        max_tokens=3,
    )
    assert reply.choices[0].finish_reason == "length"


def test_unsupported_schema_keywords_are_a_400_naming_them(gw: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "a",
                    "schema": {"type": "object", "unevaluatedProperties": False},
                },
            },
        )
    assert "unevaluatedProperties" in refused.value.message
    assert refused.value.body["param"] == "response_format"  # type: ignore[index]


def test_a_task_tier_that_is_missing_falls_back_to_the_default(gw: RunningGateway) -> None:
    info = httpx.get(f"{gw.base_url}/v1/tasks/elsewhere").json()
    assert info["tier"] == "default"

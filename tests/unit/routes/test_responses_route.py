"""``/v1/responses`` in-process (Litestar's test client, a fake engine): shapes, the stream's
events in order, stored responses (retrieve, delete, input_items, continuing) and refusals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.config import load_settings
from tests.unit.fake_runner import ANSWER, FakeRunner

MODEL = "smollm2-135m-instruct"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient[Any]]:
    settings = load_settings(overrides={"cache_dir": str(tmp_path)}, environ={})
    app = create_app(settings, runner_factory=lambda *_: FakeRunner())  # type: ignore[arg-type,return-value]
    async with AsyncTestClient(app) as test_client:
        yield test_client


def sse_events(body: str) -> list[dict[str, Any]]:
    events = []
    for block in body.strip().split("\r\n\r\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            data = json.loads(lines["data"])
            assert lines.get("event") == data["type"]  # named after its type
            events.append(data)
    return events


async def test_a_string_input_answers_with_one_message_and_usage(
    client: AsyncTestClient[Any],
) -> None:
    reply = await client.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "instructions": "Be brief."}
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "response" and body["id"].startswith("resp_")
    assert body["status"] == "completed" and body["store"] is True
    [message] = body["output"]
    assert message["type"] == "message" and message["status"] == "completed"
    assert message["content"] == [
        {"type": "output_text", "text": ANSWER, "annotations": [], "logprobs": []}
    ]
    usage = body["usage"]
    assert usage["input_tokens"] == len("Be brief.") + len("hi")
    assert usage["output_tokens"] == len(ANSWER.split())
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0


async def test_max_output_tokens_makes_it_incomplete(client: AsyncTestClient[Any]) -> None:
    body = (
        await client.post(
            "/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 2}
        )
    ).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert body["output"][0]["content"][0]["text"] == "hello from"


async def test_the_stream_sends_typed_events_in_order(client: AsyncTestClient[Any]) -> None:
    reply = await client.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": True})
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = sse_events(reply.text)
    types = [e["type"] for e in events]
    words = len(ANSWER.split())
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * words,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "".join(e["delta"] for e in events if e["type"].endswith(".delta")) == ANSWER
    final = events[-1]["response"]
    assert final["output"][0]["id"] == events[2]["item"]["id"]
    assert final["usage"]["output_tokens"] == words
    # Stored before the last event: it can be fetched at once.
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert stored == final


async def test_stored_responses_continue_list_and_delete(client: AsyncTestClient[Any]) -> None:
    first = (
        await client.post(
            "/v1/responses",
            json={"model": MODEL, "input": [{"role": "user", "content": "one"}]},
        )
    ).json()
    second = (
        await client.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "previous_response_id": first["id"],
                "input": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "two"}],
                    }
                ],
            },
        )
    ).json()
    # The conversation came first: "one", the first answer, then "two".
    assert second["usage"]["input_tokens"] == len("one") + len(ANSWER) + len("two")
    assert second["previous_response_id"] == first["id"]
    items = (await client.get(f"/v1/responses/{second['id']}/input_items")).json()
    assert items["object"] == "list" and items["has_more"] is False
    [item] = items["data"]
    assert item["content"] == [{"type": "input_text", "text": "two"}]
    assert items["first_id"] == items["last_id"] == item["id"]
    deleted = await client.delete(f"/v1/responses/{first['id']}")
    assert deleted.json() == {"id": first["id"], "object": "response.deleted", "deleted": True}
    gone = await client.get(f"/v1/responses/{first['id']}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    broken = await client.post(
        "/v1/responses",
        json={"model": MODEL, "input": "three", "previous_response_id": second["id"]},
    )
    assert broken.status_code == 404
    assert broken.json()["error"]["param"] == "previous_response_id"
    assert first["id"] in broken.json()["error"]["message"]


async def test_input_items_pages_with_order_after_and_limit(client: AsyncTestClient[Any]) -> None:
    inputs = [{"role": "user", "content": str(n)} for n in range(5)]
    made = (await client.post("/v1/responses", json={"model": MODEL, "input": inputs})).json()
    url = f"/v1/responses/{made['id']}/input_items"
    page = (await client.get(url, params={"order": "asc", "limit": 2})).json()
    assert [i["content"][0]["text"] for i in page["data"]] == ["0", "1"] and page["has_more"]
    rest = (await client.get(url, params={"order": "asc", "after": page["last_id"]})).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["2", "3", "4"]
    newest = (await client.get(url)).json()
    assert newest["data"][0]["content"][0]["text"] == "4"  # desc by default, as OpenAI
    assert (await client.get(url, params={"limit": 0})).status_code == 400
    assert (await client.get(url, params={"after": "nope"})).status_code == 400


async def test_store_false_is_not_kept(client: AsyncTestClient[Any]) -> None:
    made = (
        await client.post("/v1/responses", json={"model": MODEL, "input": "hi", "store": False})
    ).json()
    assert made["store"] is False
    assert (await client.get(f"/v1/responses/{made['id']}")).status_code == 404
    assert (await client.delete(f"/v1/responses/{made['id']}")).status_code == 404


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "allowed_tools", "tools": []},
            },
            "tool_choice",
        ),
    ],
)
async def test_what_it_cannot_do_is_a_400_naming_the_field(
    client: AsyncTestClient[Any], body: dict[str, Any], param: str
) -> None:
    reply = await client.post("/v1/responses", json={"model": MODEL, "input": "hi", **body})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


async def test_a_typing_hint_may_name_a_stored_response(client: AsyncTestClient[Any]) -> None:
    made = (await client.post("/v1/responses", json={"model": MODEL, "input": "one"})).json()
    hint = await client.post(
        "/v1/typing",
        json={"previous_response_id": made["id"], "instructions": "Be brief.", "draft": "tw"},
    )
    assert hint.status_code == 202, hint.text
    # The instructions, the stored turn, and the draft's whole words (none yet).
    assert hint.json()["prefix_tokens"] >= len("Be brief.") + len("one") + len(ANSWER)
    missing = await client.post("/v1/typing", json={"previous_response_id": "resp_nope"})
    assert missing.status_code == 404

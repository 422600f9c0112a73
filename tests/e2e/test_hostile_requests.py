"""Hostile requests on the shared gateway (issue 35): embeddings with token ids outside the
vocabulary, absurd dimensions, too many or too long inputs; previous_response_id values that
are unknown, huge, SQL or control characters. Each a clear 4xx in OpenAI's envelope."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from testsupport.process import RunningGateway

MODEL = "smollm2-135m-instruct"


def assert_clear_4xx(answer: httpx.Response, status: int = 400) -> None:
    assert answer.status_code == status, answer.text[:300]
    error = answer.json()["error"]
    assert error["message"] and error["type"]


@pytest.mark.parametrize(
    "value",
    [[10**9], [49152], [-5, 3], [1.5, 2], [True], ["hi"] * 2049, [[1] * 9000], [[]]],
    ids=[
        "id-1e9",
        "id-vocab-end",
        "negative",
        "floats",
        "bool",
        "2049-inputs",
        "9000-ids",
        "empty",
    ],
)
def test_hostile_embedding_inputs_are_400s(gateway: RunningGateway, value: Any) -> None:
    answer = httpx.post(
        f"{gateway.base_url}/v1/embeddings", json={"model": MODEL, "input": value}, timeout=60
    )
    assert_clear_4xx(answer)


@pytest.mark.parametrize("dimensions", [10**12, 0, -1])
def test_absurd_embedding_dimensions_are_400s(gateway: RunningGateway, dimensions: int) -> None:
    body = {"model": MODEL, "input": "hi", "dimensions": dimensions}
    assert_clear_4xx(httpx.post(f"{gateway.base_url}/v1/embeddings", json=body, timeout=60))


@pytest.mark.parametrize(
    "previous",
    ["resp_" + "0" * 24, "resp_" + "x" * 100_000, "resp_' OR 1=1 --", "resp_\u202e\u0000"],
    ids=["unknown", "100KB", "sql", "control"],
)
def test_hostile_previous_response_ids_are_404s(gateway: RunningGateway, previous: str) -> None:
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 4, "previous_response_id": previous}
    answer = httpx.post(f"{gateway.base_url}/v1/responses", json=body, timeout=60)
    assert answer.status_code in (400, 404), answer.text[:300]
    assert_clear_4xx(answer, answer.status_code)

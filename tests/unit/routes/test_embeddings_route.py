"""``POST /v1/embeddings`` in-process on a fake runner: shapes, encodings, refusals, metrics."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.config import load_settings
from gateway.serving.embeddings import as_base64, shortened
from tests.unit.fake_runner import FakeRunner

MODEL = "smollm2-135m-instruct"


def app() -> Any:
    settings = load_settings(overrides={"cache": {"prefix_cache_bytes": 0}}, environ={})
    return create_app(settings, runner_factory=lambda *_: FakeRunner())  # type: ignore[arg-type,return-value]


def expected(text: str) -> list[float]:
    return FakeRunner().embed(FakeRunner().render_text(text))


async def test_a_string_and_a_batch_give_the_same_vectors_in_order() -> None:
    async with AsyncTestClient(app()) as client:
        one = (await client.post("/v1/embeddings", json={"model": MODEL, "input": "ab"})).json()
        assert one["object"] == "list" and one["model"] == MODEL
        assert one["data"] == [{"object": "embedding", "index": 0, "embedding": expected("ab")}]
        assert one["usage"] == {"prompt_tokens": 2, "total_tokens": 2}
        batch = (
            await client.post("/v1/embeddings", json={"model": MODEL, "input": ["x", "ab"]})
        ).json()
        assert [d["index"] for d in batch["data"]] == [0, 1]
        assert batch["data"][1]["embedding"] == one["data"][0]["embedding"]
        assert batch["usage"]["prompt_tokens"] == 3
        metrics = (await client.get("/metrics")).text
        assert 'gateway_embedding_requests_total{outcome="ok",tier="default"} 2.0' in metrics
        assert 'gateway_embedding_input_tokens_total{tier="default"} 5.0' in metrics


async def test_token_ids_base64_and_dimensions() -> None:
    async with AsyncTestClient(app()) as client:
        ids = (await client.post("/v1/embeddings", json={"model": MODEL, "input": [97, 98]})).json()
        assert ids["data"][0]["embedding"] == expected("ab")
        lists = await client.post("/v1/embeddings", json={"model": MODEL, "input": [[97], [98]]})
        assert len(lists.json()["data"]) == 2
        encoded = await client.post(
            "/v1/embeddings", json={"model": MODEL, "input": "ab", "encoding_format": "base64"}
        )
        raw = base64.b64decode(encoded.json()["data"][0]["embedding"])
        floats = struct.unpack("<2f", raw)
        assert all(
            math.isclose(a, b, rel_tol=1e-6) for a, b in zip(floats, expected("ab"), strict=True)
        )
        short = await client.post(
            "/v1/embeddings", json={"model": MODEL, "input": "ab", "dimensions": 1}
        )
        assert short.json()["data"][0]["embedding"] == [1.0]


async def test_refusals_name_the_input() -> None:
    async with AsyncTestClient(app()) as client:
        for body, param in [
            ({"input": ["ok", ""]}, "input[1]"),
            ({"input": ["ok", "x" * 5000]}, "input[1]"),  # the fake's context: 4096 tokens
            ({"input": [[1], [2, 999]]}, "input[1]"),  # the fake's vocabulary: 256 tokens
            ({"input": "ab", "dimensions": 3}, "dimensions"),
            ({"input": []}, "input"),
            ({"input": "ab", "encoding_format": "int8"}, "encoding_format"),
        ]:
            response = await client.post("/v1/embeddings", json={"model": MODEL, **body})
            assert response.status_code == 400, body
            assert response.json()["error"]["param"] == param, response.json()
        unknown = await client.post("/v1/embeddings", json={"model": "nope", "input": "a"})
        assert unknown.status_code == 404


def test_shortened_vectors_are_unit_length_and_base64_is_little_endian_float32() -> None:
    assert shortened([3.0, 4.0, 12.0], 2) == (0.6, 0.8)
    assert base64.b64decode(as_base64([1.0, -2.5])) == struct.pack("<2f", 1.0, -2.5)

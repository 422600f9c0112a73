"""Speculative first tokens: the answer to the draft starts before Enter, and is the same."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from testsupport.process import RunningGateway, start_gateway

HISTORY = [
    {"role": "system", "content": "You are a concise geography tutor."},
    {"role": "user", "content": "I am learning about European capitals."},
    {"role": "assistant", "content": "Great, ask me anything about them."},
]


def wait_for_speculation(
    http: httpx.Client, hint_id: str, timeout: float = 60
) -> dict[str, object]:
    """The hint once its answer's first tokens are computed (it stays ``ready``)."""
    deadline = time.monotonic() + timeout
    while True:
        hint = http.get(f"/v1/typing/{hint_id}").json()
        if hint["speculated"] or (
            hint["state"] != "ready" and hint["state"] not in ("queued", "computing")
        ):
            return hint  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, hint
        time.sleep(0.05)


def chat(gateway: RunningGateway, question: str, session: str | None = None) -> tuple[str, float]:
    body: dict[str, object] = {
        "model": "smollm2-135m-instruct",
        "messages": [*HISTORY, {"role": "user", "content": question}],
        "max_tokens": 30,
        "temperature": 0,
        "stream": True,
    }
    if session:
        body["session"] = session
    parts: list[str] = []
    first = None
    started = time.perf_counter()
    with httpx.stream(
        "POST", f"{gateway.base_url}/v1/chat/completions", json=body, timeout=120
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                first = first or time.perf_counter() - started
                parts.append(
                    httpx.Response(200, content=line[6:]).json()["choices"][0]["delta"]["content"]
                )
    assert first is not None
    return "".join(parts), first


def speculations(http: httpx.Client, event: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'gateway_speculations_total{{event="{event}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_pause_speculates_and_enter_streams_it_identically(gateway: RunningGateway) -> None:
    # A short answer is speculated whole; a long one for 16 tokens, then generated after them.
    for index, question in enumerate(
        ["What is the capital of Portugal?", "Tell me about the long history of Lisbon."]
    ):
        reference, _ = chat(gateway, question)  # computed after Enter, as always
        with gateway.http() as http:
            used_before = speculations(http, "used")
            hint = http.post(
                "/v1/typing",
                json={"messages": HISTORY, "draft": question, "session": f"spec-{index}"},
            ).json()
            state = wait_for_speculation(http, hint["id"])
            assert state["state"] == "ready", state
            assert 0 < state["speculated"] <= 16  # type: ignore[operator]
            text, first_token = chat(gateway, question, session=f"spec-{index}")
            assert text == reference  # token-identical to the run without speculation
            assert first_token < 0.5  # sent from memory (the bench measures it properly)
            assert speculations(http, "used") == used_before + 1
            assert http.get(f"/v1/typing/{hint['id']}").json()["state"] == "used"
    with gateway.http() as http:
        # The user changed the text before Enter: the speculation is dropped and counted.
        mismatched_before = speculations(http, "discarded_mismatch")
        hint = http.post(
            "/v1/typing",
            json={
                "messages": HISTORY,
                "draft": "What is the capital of Spain?",
                "session": "spec-9",
            },
        ).json()
        assert wait_for_speculation(http, hint["id"])["speculated"]
        text, _ = chat(gateway, "What is the capital of Spain? And of Italy?", session="spec-9")
        assert text
        counted = [
            line for line in http.get("/metrics").text.splitlines() if "speculations_total" in line
        ]
        assert speculations(http, "discarded_mismatch") == mismatched_before + 1, counted


@pytest.fixture(scope="module")
def own_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """A gateway of this module's own. Sampled text is compared to the token: a KV cache reused
    from other modules' traffic (the shared gateway's in-memory or saved prefixes, computed in
    other chunks) differs in the last float bits and can flip a sampled token later on."""
    running = start_gateway(tmp_path_factory.mktemp("seeded-speculation"), {})
    yield running
    running.stop()


def test_a_seeded_request_gets_the_tokens_its_hint_sampled_ahead(
    own_gateway: RunningGateway,
) -> None:
    """The hint declares the request's sampling: the answer's start is sampled ahead with the
    same seed, and the streamed answer (official SDK) equals the one sampled after Enter."""
    gateway = own_gateway
    question = "Tell me a story about a harbour in Lisbon."
    sampling = {"temperature": 0.9, "top_p": 0.95, "seed": 1234}
    client = gateway.openai(timeout=120)

    def sampled(session: str | None) -> str:
        stream = client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[*HISTORY, {"role": "user", "content": question}],
            max_tokens=28,  # 16 speculated, 12 sampled after them
            stream=True,
            extra_body={"session": session} if session else None,
            **sampling,
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    def speculate_with_hint(http: httpx.Client) -> None:
        """The hint, with the draft and the sampling, until its answer's start is computed."""
        hint = http.post(
            "/v1/typing",
            json={"messages": HISTORY, "draft": question, "session": "seeded", **sampling},
        ).json()
        assert wait_for_speculation(http, hint["id"])["speculated"]

    reference = sampled(None)
    assert reference != sampled_greedy(gateway, question)  # really sampled
    with gateway.http() as http:
        used_before = speculations(http, "used")
        speculate_with_hint(http)
        assert sampled("seeded") == reference
        assert speculations(http, "used") == used_before + 1
        # Another seed than the hint's: the speculation is dropped, the answer is the request's.
        discarded_before = speculations(http, "discarded_sampling")
        speculate_with_hint(http)
        sampling["seed"] = 99
        other = sampled("seeded")
        assert speculations(http, "discarded_sampling") == discarded_before + 1
        assert other == sampled(None)


def sampled_greedy(gateway: RunningGateway, question: str) -> str:
    text, _ = chat(gateway, question)
    return text


@pytest.fixture(scope="module")
def long_speculation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """A gateway that speculates 200 tokens: Enter lands while the speculation still runs."""
    running = start_gateway(
        tmp_path_factory.mktemp("long-speculation"), {"cache": {"speculate_tokens": 200}}
    )
    yield running
    running.stop()


def test_enter_during_a_speculation_adopts_what_it_computed(
    long_speculation: RunningGateway,
) -> None:
    gateway = long_speculation
    question = "Tell me about the long history of Lisbon."
    with gateway.http() as http:
        hint = http.post(
            "/v1/typing", json={"messages": HISTORY, "draft": question, "session": "adopt"}
        ).json()
        deadline = time.monotonic() + 60
        while speculations(http, "started") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(2.0)  # a few tokens computed, far from 200
        assert http.get(f"/v1/typing/{hint['id']}").json()["speculated"] is None  # still running
        text, _ = chat(gateway, question, session="adopt")
        assert speculations(http, "adopted_running") == 1
        assert speculations(http, "used") == 1
        served = http.get("/metrics").text
        assert "gateway_speculated_tokens_served_total 0.0" not in served
    reference, _ = chat(gateway, question)  # the same request, no hint
    assert text == reference

"""Speculative first tokens: the answer to the draft starts before Enter, and is the same."""

from __future__ import annotations

import time

import httpx

from gateway.bench.process import RunningGateway

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

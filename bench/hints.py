"""Typing hints: time to first token cold vs after a ``ready`` hint, on a long fixed context.

Every run uses a fresh context (a unique tag leads the system prompt), so a cold run can
never hit the prefix cache and a warm run's cache comes from its own hint. A third variant
prefills only the short new message (with a one-line system prompt), and raw mlx-lm times
only the tail's prefill on top of an already cached context: the least a warm request can
do. Multi-turn reuse without hints is measured too.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from bench.streaming import stream_chat
from gateway.modelstore.store import DEFAULT_MODEL_ID
from testsupport.process import start_gateway

NEW_MESSAGE = "Given all that, which city should I visit first, and why?"
SPECULATED_MAX_TOKENS = 32  # more than the 16 speculated: the rest follows from their cache
SHORT_MAX_TOKENS = 8  # fewer than the 16 speculated: the first 8 of them (issue 23)
CITIES = ["Lisbon", "Porto", "Seville", "Valencia", "Bologna", "Lyon", "Ghent", "Krakow"]


# fixed_context's size: ~480 tokens of turns and ~33 tokens per profile note past the first
# hundred (SmolLM2's tokenizer; measured: 275 notes 9,498 tokens, 1,153 notes 39,170), so that
# a context of N tokens has about (N - 480) / 33 notes.
CONTEXT_BASE_TOKENS, TOKENS_PER_NOTE, DEFAULT_NOTES = 480, 33, 40


def notes_for(tokens: int) -> int:
    """How many profile notes make a ``fixed_context`` of about ``tokens`` tokens."""
    return max(1, (tokens - CONTEXT_BASE_TOKENS) // TOKENS_PER_NOTE)


def fixed_context(tag: str, notes: int = DEFAULT_NOTES) -> list[dict[str, str]]:
    """A system prompt with a user profile plus a few turns of history: over 1,500 tokens
    with the default 40 notes (``notes_for`` sizes it for another length)."""
    profile = " ".join(
        f"Note {i}: the user enjoyed {CITIES[i % len(CITIES)]} for its food, its museums and "
        f"its old streets, and would go back in spring if the trains were cheap."
        for i in range(notes)
    )
    messages = [
        {
            "role": "system",
            "content": f"Session {tag}. You are a careful travel assistant. Profile: {profile}",
        }
    ]
    for city in CITIES[:6]:
        messages.append(
            {"role": "user", "content": f"What should I know about {city} before I go?"}
        )
        messages.append(
            {
                "role": "assistant",
                "content": f"{city} is best explored on foot; book museums ahead, try the local "
                f"markets in the morning, and keep an evening free for a long dinner.",
            }
        )
    return messages


def _raw_tail_floor() -> Callable[[], float]:
    """Raw mlx-lm: prefill the fixed context once; each call times only the tail + 1 token.

    This is the least work a warm request can do: the new tokens still attend to the
    whole cached context.
    """
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported, as the gateway does
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from gateway.config import default_cache_dir
    from gateway.engines.weights import default_mode, load_model
    from gateway.modelstore.store import ModelStore

    folder = ModelStore(default_cache_dir()).ensure(DEFAULT_MODEL_ID)
    model, tokenizer, _ = load_model(folder, default_mode(compute))
    context = fixed_context("rawfloor")
    fixed = tokenizer.apply_chat_template(context, add_generation_prompt=False)
    full = tokenizer.apply_chat_template(
        [*context, {"role": "user", "content": NEW_MESSAGE}], add_generation_prompt=True
    )
    assert full[: len(fixed)] == fixed
    cache = make_prompt_cache(model)
    for start in range(0, len(fixed), 512):
        model(mx.array(fixed[start : start + 512])[None], cache=cache)
        mx.eval([c.state for c in cache])
    tail = mx.array(full[len(fixed) :])[None]

    def measure() -> float:
        private = copy.deepcopy(cache)
        started = time.perf_counter()
        logits = model(tail, cache=private)
        mx.argmax(logits[:, -1, :], axis=-1).item()
        return time.perf_counter() - started

    return measure


def _ttft(
    client: httpx.Client, messages: list[dict[str, str]], max_tokens: int = 4
) -> tuple[float, dict[str, Any]]:
    first, usage, _ = _ttft_text(client, messages, max_tokens)
    return first, usage


def _ttft_text(
    client: httpx.Client, messages: list[dict[str, str]], max_tokens: int = 4
) -> tuple[float, dict[str, Any], str]:
    """Time to first token, usage and the text of one greedy streamed request."""
    body = {
        "model": DEFAULT_MODEL_ID,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    streamed = stream_chat(client, body)
    return streamed.ttft, streamed.usage, streamed.text


def _speculated_hint(client: httpx.Client, messages: list[dict[str, str]], draft: str) -> None:
    """A hint with the draft, followed until its answer's first tokens are computed."""
    hint = client.post(
        "/v1/typing", json={"messages": messages, "draft": draft, "session": "bench"}
    ).json()
    deadline = time.monotonic() + 600
    while not hint.get("speculated"):
        if hint["state"] not in ("queued", "computing", "ready") or time.monotonic() > deadline:
            raise RuntimeError(f"hint ended {hint['state']} without a speculation")
        time.sleep(0.02)
        hint = client.get(f"/v1/typing/{hint['id']}").json()


def _ready_hint(client: httpx.Client, messages: list[dict[str, str]]) -> dict[str, Any]:
    hint = client.post("/v1/typing", json={"messages": messages}).json()
    while hint["state"] in ("queued", "computing"):
        time.sleep(0.05)
        hint = client.get(f"/v1/typing/{hint['id']}").json()
    if hint["state"] != "ready":
        raise RuntimeError(f"hint ended {hint['state']}")
    return hint


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    gateway = start_gateway(workdir, {"cache": {"hint_idle_seconds": 3600}})
    raw_floor = _raw_tail_floor()
    samples: dict[str, list[float]] = {
        "cold": [],
        "warm (ready hint)": [],
        "raw tail on cached ctx": [],
        "tail-only prompt": [],
        "hinted + speculated": [],
        f"hinted + speculated, max_tokens {SHORT_MAX_TOKENS}": [],
    }
    identical: list[bool] = []
    identical_short: list[bool] = []
    details: list[dict[str, Any]] = []
    question = {"role": "user", "content": NEW_MESSAGE}
    try:
        with httpx.Client(base_url=gateway.base_url, timeout=600) as client:
            for _ in range(args.runs + 1):
                cold, cold_usage = _ttft(client, [*fixed_context(uuid.uuid4().hex[:8]), question])
                warm_context = fixed_context(uuid.uuid4().hex[:8])
                hint = _ready_hint(client, warm_context)
                warm, warm_usage = _ttft(client, [*warm_context, question])
                tail_system = {"role": "system", "content": f"Session {uuid.uuid4().hex[:8]}."}
                tail, tail_usage = _ttft(client, [tail_system, question])
                spec_context = fixed_context(uuid.uuid4().hex[:8])
                _speculated_hint(client, spec_context, NEW_MESSAGE)
                body = [*spec_context, question]
                speculated, _, spec_text = _ttft_text(client, body, SPECULATED_MAX_TOKENS)
                # The same request again, with nothing speculated: the text must be the same.
                _, _, plain_text = _ttft_text(client, body, SPECULATED_MAX_TOKENS)
                identical.append(spec_text == plain_text)
                samples["hinted + speculated"].append(speculated)
                short_context = fixed_context(uuid.uuid4().hex[:8])
                _speculated_hint(client, short_context, NEW_MESSAGE)
                body = [*short_context, question]
                short, _, short_text = _ttft_text(client, body, SHORT_MAX_TOKENS)
                _, _, plain_short = _ttft_text(client, body, SHORT_MAX_TOKENS)
                identical_short.append(short_text == plain_short)
                samples[f"hinted + speculated, max_tokens {SHORT_MAX_TOKENS}"].append(short)
                samples["cold"].append(cold)
                samples["warm (ready hint)"].append(warm)
                samples["raw tail on cached ctx"].append(raw_floor())
                samples["tail-only prompt"].append(tail)
                details.append(
                    {
                        "cold_prompt_tokens": cold_usage["prompt_tokens"],
                        "warm_prompt_tokens": warm_usage["prompt_tokens"],
                        "warm_cached_tokens": warm_usage["prompt_tokens_details"]["cached_tokens"],
                        "hint_prefix_tokens": hint["prefix_tokens"],
                        "tail_only_prompt_tokens": tail_usage["prompt_tokens"],
                    }
                )
            turn_one = [*fixed_context(uuid.uuid4().hex[:8])[:3], question]
            reply = client.post(
                "/v1/chat/completions",
                json={
                    "model": DEFAULT_MODEL_ID,
                    "messages": turn_one,
                    "max_tokens": 40,
                    "temperature": 0,
                },
            ).json()
            answer = reply["choices"][0]["message"]["content"]
            turn_two = [
                *turn_one,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "And the second?"},
            ]
            second = client.post(
                "/v1/chat/completions",
                json={
                    "model": DEFAULT_MODEL_ID,
                    "messages": turn_two,
                    "max_tokens": 4,
                    "temperature": 0,
                },
            ).json()
    finally:
        gateway.stop()
    summaries = {name: Summary.of(values[1:]) for name, values in samples.items()}
    print(table([("time to first token (s)", name, s) for name, s in summaries.items()]))
    speedup = ratio(summaries["cold"], summaries["warm (ready hint)"])
    versus_floor = ratio(summaries["warm (ready hint)"], summaries["raw tail on cached ctx"])
    versus_tail = ratio(summaries["warm (ready hint)"], summaries["tail-only prompt"])
    turn_one_total = reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    reused = second["usage"]["prompt_tokens_details"]["cached_tokens"] / turn_one_total
    print(
        f"\ncold/warm (medians): {speedup:.1f}x   warm/raw tail prefill: {versus_floor:.2f}"
        f"   warm/tail-only prompt: {versus_tail:.2f}"
    )
    print(f"tokens of the last run: {details[-1]}")
    print(
        f"hinted + speculated: median {1000 * summaries['hinted + speculated'].median:.1f} ms "
        f"(goal <= 50); text identical to the run without speculation in "
        f"{sum(identical[1:])} of {len(identical) - 1} runs"
    )
    short_summary = summaries[f"hinted + speculated, max_tokens {SHORT_MAX_TOKENS}"]
    print(
        f"hinted + speculated, max_tokens {SHORT_MAX_TOKENS}: median {1000 * short_summary.median:.1f} ms "
        f"(goal <= 50); text identical to the run without speculation in "
        f"{sum(identical_short[1:])} of {len(identical_short) - 1} runs"
    )
    print(
        f"multi-turn without hints: turn 2 cached {second['usage']['prompt_tokens_details']['cached_tokens']}"
        f" of turn 1's {turn_one_total} prompt+answer tokens ({100 * reused:.1f}%)"
    )
    return {
        "benchmark": "typing",
        "runs": args.runs,
        "summaries": {name: s.as_dict() for name, s in summaries.items()},
        "ratio_cold_over_warm": speedup,
        "ratio_warm_over_raw_tail_prefill": versus_floor,
        "ratio_warm_over_tail_only_prompt": versus_tail,
        "tokens": details[1:],
        "multi_turn_reuse_fraction": reused,
        "speculated_identical_runs": sum(identical[1:]),
        "speculated_short_identical_runs": sum(identical_short[1:]),
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0

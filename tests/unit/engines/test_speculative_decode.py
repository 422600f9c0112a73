"""Speculative decoding on the real SmolLM2: drafted tokens verified in one pass give the
tokens that decoding one at a time gives (greedy, and seeded sampling draw for draw), with
penalties, a grammar, log-probabilities, stop strings and passes paused in stages, and leave
a cache that holds exactly the tokens it says. Every test also checks that drafts were made
and accepted, so that it cannot pass with drafting silently off."""

from __future__ import annotations

import json
from collections.abc import Iterator

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from gateway.config import default_cache_dir
from gateway.engines.device import choose_compute_path
from gateway.engines.draft_model import DraftCaches, DraftModel
from gateway.engines.drafting import DraftPolicy
from gateway.engines.mlx_runner import MLXRunner
from gateway.engines.runner import PromptState
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.scheduler.pacing import PASS_POINT, ChunkBudget
from gateway.seam.backend import Finished, SamplingParams, TokenEvent
from gateway.seam.request_parts import Grammar

# A reply that copies its prompt: what an edit or an agent's file read looks like.
LINES = "\n".join(f"item_{n} = compute_value({n}, scale={n * 3})" for n in range(12))
COPY = [
    {"role": "system", "content": "You repeat text exactly as given."},
    {"role": "user", "content": f"Repeat these lines exactly:\n{LINES}"},
]
TOKENS = 32


@pytest.fixture(scope="module")
def runner() -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    made = MLXRunner(DEFAULT_MODEL_ID, folder, choose_compute_path())
    # The pace a draft is weighed against: measured by the first plain steps, given here so
    # that every test drafts from its first tokens on.
    made.timing.seconds_per_step = 1.0
    return made


def run(
    runner: MLXRunner, params: SamplingParams, speculation: str, messages: list | None = None
) -> tuple[list[TokenEvent], Finished, PromptState]:
    runner.speculation = speculation
    runner.timing.seconds_per_step = 1.0  # drafting always pays, as far as it can tell
    prompt = runner.render_chat(messages or COPY)
    generation = runner.generate(prompt, params)
    events = list(generation)
    finished = events[-1]
    assert isinstance(finished, Finished) and generation.state is not None
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    return tokens, finished, generation.state


def ids(events: list[TokenEvent]) -> list[int]:
    return [t for e in events for t in e.token_ids]


def assert_drafted(finished: Finished) -> None:
    assert finished.drafted is not None and finished.drafted.method == "lookup"
    assert finished.drafted.accepted > 0, finished.drafted


def test_greedy_tokens_are_generate_steps_with_drafts_accepted(runner: MLXRunner) -> None:
    prompt = runner.render_chat(COPY)
    reference = [
        int(token)
        for token, _ in generate_step(
            mx.array(prompt), runner.model, max_tokens=TOKENS, prompt_cache=runner.new_cache()
        )
    ]
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0)
    drafted, finished, state = run(runner, params, "lookup")
    assert ids(drafted) == reference
    assert_drafted(finished)
    assert finished.drafted is not None and finished.drafted.accepted >= TOKENS // 4
    plain, plain_finished, _ = run(runner, params, "off")
    assert ids(plain) == reference and plain_finished.drafted is None
    # The cache holds exactly the tokens the state names (none drafted past the end).
    assert runner.cache_length(state.cache) == len(state.tokens)
    assert list(state.tokens) == (prompt + reference)[: len(state.tokens)]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=TOKENS, temperature=0.8, top_p=0.95, seed=11),
        SamplingParams(
            max_tokens=TOKENS, temperature=0.6, presence_penalty=0.4, frequency_penalty=0.3, seed=5
        ),
        SamplingParams(max_tokens=TOKENS, temperature=0.0, logprobs=3),
    ],
    ids=["seeded", "penalties-seeded", "logprobs"],
)
def test_each_token_and_its_logprobs_are_those_of_decoding_one_at_a_time(
    runner: MLXRunner, params: SamplingParams
) -> None:
    drafted, finished, _ = run(runner, params, "lookup")
    plain, _, _ = run(runner, params, "off")
    assert ids(drafted) == ids(plain)
    assert "".join(e.text for e in drafted) == "".join(e.text for e in plain)
    assert_drafted(finished)
    if params.logprobs:
        for a, b in zip(drafted, plain, strict=True):
            for x, y in zip(a.logprobs, b.logprobs, strict=True):
                assert x.chosen.token == y.chosen.token
                assert x.chosen.logprob == pytest.approx(y.chosen.logprob, abs=1e-3)
                assert [t.token for t in x.top] == [t.token for t in y.top]


def test_a_grammar_sees_exactly_the_tokens_kept(runner: MLXRunner) -> None:
    schema = {
        "type": "object",
        "properties": {"lines": {"type": "array", "items": {"type": "string"}}},
        "required": ["lines"],
    }
    grammar = Grammar("json_schema", json.dumps(schema))
    messages = [*COPY[:1], {"role": "user", "content": f"As JSON, the lines:\n{LINES}"}]
    params = SamplingParams(max_tokens=96, temperature=0.0, grammar=grammar)
    drafted, finished, _ = run(runner, params, "lookup", messages)
    plain, _, _ = run(runner, params, "off", messages)
    assert ids(drafted) == ids(plain)
    assert_drafted(finished)


def test_a_stop_inside_an_accepted_draft_ends_the_reply_and_trims_the_cache(
    runner: MLXRunner,
) -> None:
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0, stop=("item_1",))
    drafted, finished, state = run(runner, params, "lookup")
    plain, plain_finished, _ = run(runner, params, "off")
    assert "".join(e.text for e in drafted) == "".join(e.text for e in plain)
    assert finished.reason == plain_finished.reason == "stop"
    assert finished.stop_sequence == "item_1"
    assert_drafted(finished)
    assert runner.cache_length(state.cache) == len(state.tokens)


class Grained:
    """Pacing that computes every pass a layer at a time and never queues a step ahead."""

    def pause_grain(self) -> float | None:
        return 1e-9

    def chunk_budget(self, base: int) -> ChunkBudget:
        return ChunkBudget(base)

    def decode_ahead(self) -> bool:
        return False


def pause_points(events: Iterator[object], generation: object) -> Iterator[object]:
    """Every event, the cache released and restored at every third token (as a paused job's
    is when memory is short)."""
    count = 0
    for event in events:
        if isinstance(event, TokenEvent):
            count += 1
            if count % 3 == 0:
                assert generation.release_cache()  # type: ignore[attr-defined]
        yield event


def test_verifying_passes_in_stages_and_released_caches_change_no_token(
    runner: MLXRunner,
) -> None:
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0)
    plain, _, _ = run(runner, params, "off")
    runner.speculation = "lookup"
    runner.timing.seconds_per_step = 1.0
    runner.timing.pacing = Grained()
    try:
        generation = runner.generate(runner.render_chat(COPY), params)
        events = list(pause_points(iter(generation), generation))
    finally:
        runner.timing.pacing = None
    assert PASS_POINT in events
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert ids(tokens) == ids(plain)
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert_drafted(finished)


def test_a_draft_model_gives_the_models_own_tokens(runner: MLXRunner) -> None:
    """The model as its own draft (every guess right) and a random-weight draft with the same
    vocabulary (nearly every guess wrong): the tokens are the model's either way."""
    from mlx_lm.models import llama

    params = SamplingParams(max_tokens=TOKENS, temperature=0.0)
    plain, _, _ = run(runner, params, "off")
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        rms_norm_eps=1e-5,
        vocab_size=runner.vocab_size,
        num_key_value_heads=4,
    )
    mx.random.seed(0)
    stranger = llama.Model(args)
    prompt = runner.render_chat(COPY)
    accepted = {}
    for name, draft in (("self", runner.model), ("random", stranger)):
        loop = runner.decode_loop(prompt, runner.new_cache(), params)
        loop.drafter, loop.policy = DraftModel(draft), DraftPolicy(8)
        runner.timing.seconds_per_step = 1.0
        tokens = [step[0] for step in loop.tokens(prompt, TOKENS) if isinstance(step, tuple)]
        assert tokens == ids(plain), name
        assert loop.drafted is not None
        accepted[name] = loop.drafted.accepted / loop.drafted.drafted
    assert accepted["self"] > 0.9 and accepted["random"] < 0.5


class _Counting:
    """A model that counts the tokens fed to it (the draft's catch-up and its guesses)."""

    def __init__(self, model: object) -> None:
        self.model = model
        self.fed = 0
        self.layers = model.layers  # type: ignore[attr-defined]  (make_prompt_cache reads them)

    def __call__(self, inputs: mx.array, cache: object) -> mx.array:
        self.fed += inputs.shape[1]
        return self.model(inputs, cache=cache)  # type: ignore[operator]


def test_a_draft_models_cache_serves_the_next_turn_of_the_conversation(
    runner: MLXRunner,
) -> None:
    """The draft's cache outlives its generation (``DraftCaches``): the next request of the
    same conversation feeds the draft only what is new, not the whole conversation again,
    and its tokens are still the model's."""
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0)
    draft, kept = _Counting(runner.model), DraftCaches()
    first = runner.render_chat(COPY)
    reply, _, _ = run(runner, params, "off")
    follow_up = [
        *COPY,
        {"role": "assistant", "content": "".join(e.text for e in reply)},
        {"role": "user", "content": "Again, please."},
    ]
    second = runner.render_chat(follow_up)
    plain_second, _, _ = run(runner, params, "off", follow_up)
    fed, drafted = [], []
    for prompt, plain in ((first, ids(reply)), (second, ids(plain_second))):
        loop = runner.decode_loop(prompt, runner.new_cache(), params)
        loop.drafter, loop.policy = DraftModel(draft, kept), DraftPolicy(8)
        runner.timing.seconds_per_step = 1.0
        before = draft.fed
        tokens = [step[0] for step in loop.tokens(prompt, TOKENS) if isinstance(step, tuple)]
        assert tokens == plain
        assert loop.drafted is not None and loop.drafted.accepted > 0
        fed.append(draft.fed - before)
        drafted.append(loop.drafted.drafted)
    assert len(kept.entries) == 1
    shared = len(first)  # the second prompt starts with the first (its reply and turn after)
    assert second[:shared] == first
    # The first fed its whole prompt and its guesses; the second only what follows the
    # shared start, and its guesses (without the kept cache: all of its 265-odd tokens).
    assert fed[0] >= len(first)
    assert fed[1] <= len(second) - shared + drafted[1]

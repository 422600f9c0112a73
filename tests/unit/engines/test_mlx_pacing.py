"""The runner paced by the scheduler, on the real SmolLM2: a decode step not queued ahead
(a user may arrive) leaves nothing computing behind a pause and changes no token; passes
computed in stages, paused inside and resumed after another job, change no token nor cache;
a prefill chunk's time budget becomes tokens at the measured pace."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from gateway.config import default_cache_dir
from gateway.engines.device import choose_compute_path
from gateway.engines.mlx_runner import MLXRunner
from gateway.engines.pass_timing import MIN_TIMED_CHUNK_TOKENS
from gateway.engines.runner import PromptState
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.scheduler.pacing import PASS_POINT, ChunkBudget
from gateway.seam.backend import Finished, SamplingParams, TokenEvent

TOKENS = 24


class ScriptedPacing:
    """Queues a step ahead or not, by a script (a user arriving and leaving); passes whole
    or, with a ``grain``, in groups of layers."""

    def __init__(
        self, ahead: Iterator[bool], budget: ChunkBudget | None = None, grain: float | None = None
    ) -> None:
        self.ahead = ahead
        self.budget = budget
        self.grain = grain
        self.asked = 0

    def pause_grain(self) -> float | None:
        return self.grain

    def chunk_budget(self, base: int) -> ChunkBudget:
        return self.budget or ChunkBudget(base)

    def decode_ahead(self) -> bool:
        self.asked += 1
        return next(self.ahead)


@pytest.fixture(scope="module")
def runner() -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    # Drafting off: these tests are about the pipelined steps (test_speculative_decode: both).
    return MLXRunner(DEFAULT_MODEL_ID, folder, choose_compute_path(), speculation="off")


def prompt_of(runner: MLXRunner) -> list[int]:
    return runner.render_chat([{"role": "user", "content": "Tell me about rivers."}])


def tokens_of(
    runner: MLXRunner, params: SamplingParams, prompt: list[int] | None = None
) -> list[int]:
    events = runner.generate(prompt or prompt_of(runner), params)
    return [t for event in events if isinstance(event, TokenEvent) for t in event.token_ids]


def alternating() -> Iterator[bool]:
    while True:
        yield from (True, False, False, True)


def test_greedy_tokens_are_mlx_lms_whether_or_not_steps_are_queued_ahead(
    runner: MLXRunner,
) -> None:
    prompt = prompt_of(runner)
    reference = [
        int(token)
        for token, _ in generate_step(
            mx.array(prompt), runner.model, max_tokens=TOKENS, prompt_cache=runner.new_cache()
        )
    ]
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0)
    for script in (alternating(), iter(lambda: False, None)):
        runner.timing.pacing = pacing = ScriptedPacing(script)
        try:
            assert tokens_of(runner, params) == reference
        finally:
            runner.timing.pacing = None
        assert pacing.asked >= TOKENS - 1


def test_sampled_tokens_do_not_depend_on_queuing_ahead(runner: MLXRunner) -> None:
    params = SamplingParams(max_tokens=TOKENS, temperature=0.9, top_p=0.95, seed=7)
    pipelined = tokens_of(runner, params)
    runner.timing.pacing = ScriptedPacing(alternating())
    try:
        assert tokens_of(runner, params) == pipelined
    finally:
        runner.timing.pacing = None


@pytest.mark.parametrize("ahead", [True, False])
def test_a_paused_generation_leaves_a_step_computing_only_when_queued_ahead(
    runner: MLXRunner, ahead: bool
) -> None:
    prompt = prompt_of(runner)
    cache = runner.new_cache()
    runner.timing.pacing = ScriptedPacing(iter(lambda: ahead, None))
    try:
        generation = runner.generate(
            prompt, SamplingParams(max_tokens=TOKENS, temperature=0.0), PromptState(cache, ())
        )
        produced = 0
        for event in generation:  # paused after the third token, as the scheduler would
            produced += isinstance(event, TokenEvent)
            if produced == 3:
                break
        fed = runner.cache_length(cache)
        generation.close()
    finally:
        runner.timing.pacing = None
    # Fed: the prompt and every token but the last read (the next step feeds that one).
    assert fed == len(prompt) + 2 + (1 if ahead else 0)


def test_a_time_budget_becomes_tokens_at_the_measured_pace(runner: MLXRunner) -> None:
    runner.timing.pacing = ScriptedPacing(iter(()), ChunkBudget(16, seconds=0.04))
    try:
        runner.timing.seconds_per_token = None  # not measured yet: the budget's tokens
        assert runner.timing.chunk_tokens() == 16
        runner.timing.seconds_per_token = 0.002  # 20 would fit: at most the budget's tokens
        assert runner.timing.chunk_tokens() == 16
        runner.timing.seconds_per_token = 0.004  # 10 fit: 8, a power of two (a shape seen before)
        assert runner.timing.chunk_tokens() == 8
        runner.timing.seconds_per_token = 0.0027  # 14 fit: 8 again
        assert runner.timing.chunk_tokens() == 8
        runner.timing.pacing = ScriptedPacing(iter(()), ChunkBudget(512, seconds=0.04))
        lengths = set()
        for pace in (1e-4, 1.1e-4, 1.3e-4, 2e-4, 3.3e-4, 7e-4):  # 400, 363, 307, 200, 121, 57 fit
            runner.timing.seconds_per_token = pace
            lengths.add(runner.timing.chunk_tokens())
        assert lengths == {256, 128, 64, 32}  # six paces, four lengths
        runner.timing.device = "cuda"  # shapes compiled per length there
        try:
            assert {runner.timing.chunk_tokens() for _ in range(2)} == {512}  # the budget's tokens
        finally:
            runner.timing.device = runner.compute.device
        runner.timing.pacing = ScriptedPacing(iter(()), ChunkBudget(16, seconds=0.04))
        runner.timing.seconds_per_token = 0.1  # none fits: the smallest worth a pass
        assert runner.timing.chunk_tokens() == MIN_TIMED_CHUNK_TOKENS
        cache = runner.new_cache()
        assert list(runner.prefill(list(range(100, 140)), cache))[-1] == 40
        assert runner.timing.seconds_per_token is not None and runner.timing.seconds_per_token > 0
    finally:
        runner.timing.pacing = None


def always(value: bool) -> Iterator[bool]:
    return iter(lambda: value, None)


def test_passes_in_stages_paused_inside_for_another_job_change_no_token(
    runner: MLXRunner,
) -> None:
    """Background work that a user may preempt computes a pass longer than the pause grain
    in groups of layers, with a ``PASS_POINT`` between groups; a user's generation run at
    such a point (the rest of the paused pass still lazy) changes neither job's tokens nor
    log-probabilities."""
    params = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, seed=7, logprobs=2)
    user_params = SamplingParams(max_tokens=4, temperature=0.0)
    user_prompt = runner.render_chat([{"role": "user", "content": "Name a colour."}])
    whole = list(runner.generate(prompt_of(runner), params))
    user_alone = tokens_of(runner, user_params, user_prompt)
    layers = len(runner.new_cache())
    runner.timing.pacing = pacing = ScriptedPacing(always(True), grain=1e-9)  # a group per layer
    try:
        staged, points, user_runs = [], 0, []
        for event in runner.generate(prompt_of(runner), params):
            if event is PASS_POINT:
                points += 1
                if points % 67 == 5:  # paused inside a pass; the user's job runs whole
                    pacing.grain = None
                    user_runs.append(tokens_of(runner, user_params, user_prompt))
                    pacing.grain = 1e-9
                continue
            staged.append(event)
    finally:
        runner.timing.pacing = None
    assert staged == whole  # tokens, text, log-probabilities and usage
    finished = whole[-1]
    assert isinstance(finished, Finished) and finished.completion_tokens > 3
    # Every pass once its pace is known (the first token's, each decode step's): a point
    # after each layer but the last.
    assert points >= (layers - 1) * (finished.completion_tokens - 1)
    assert user_runs and all(run == user_alone for run in user_runs)


def test_only_a_pass_longer_than_the_grain_is_computed_in_stages(runner: MLXRunner) -> None:
    runner.timing.pacing = ScriptedPacing(always(True), grain=0.01)
    try:
        assert runner.timing.stages(None) == 1  # the pace not known yet: whole
        assert runner.timing.stages(0.004) == 1  # a GPU's decode step: whole, queued ahead
        assert runner.timing.stages(0.065) == 7  # this CPU's: groups of under 10 ms
        runner.timing.seconds_per_step = 0.065
        assert not runner.timing.decode_ahead()  # a step in groups is never queued ahead
        runner.timing.seconds_per_step = 0.004
        assert runner.timing.decode_ahead()
        runner.timing.pacing.grain = 0.001  # a GPU's: its short decode steps whole, queued ahead
        assert runner.timing.step_stages() == 1 and runner.timing.decode_ahead()
        assert runner.timing.stages(0.004) == 4  # a prefill chunk as long is cut
        runner.timing.pacing.grain = None  # nobody may arrive: whole
        assert runner.timing.stages(0.065) == 1
    finally:
        runner.timing.pacing = None


def test_a_prefill_in_stages_fills_the_same_cache_and_holds_it_while_paused(
    runner: MLXRunner,
) -> None:
    tokens = prompt_of(runner) * 3
    layers = len(runner.new_cache())
    whole, staged = runner.new_cache(), runner.new_cache()
    runner.timing.pacing = pacing = ScriptedPacing(always(True), ChunkBudget(16))  # the same chunks
    try:
        assert list(runner.prefill(tokens, whole))[-1] == len(tokens)
        pacing.grain = 1e-9  # the pace is known: a group per layer
        steps = list(runner.prefill(tokens, staged))
    finally:
        runner.timing.pacing = None
    assert [s for s in steps if s is not PASS_POINT][-1] == len(tokens)
    assert steps.count(PASS_POINT) == (layers - 1) * -(-len(tokens) // 16)
    for a, b in zip(whole, staged, strict=True):
        assert mx.array_equal(a.state[0], b.state[0]) and mx.array_equal(a.state[1], b.state[1])
    generation = runner.generate(prompt_of(runner), SamplingParams(max_tokens=4))
    runner.timing.pacing = ScriptedPacing(always(True), grain=1e-9)
    try:
        assert next(generation) is PASS_POINT
        assert not generation.release_cache()  # the rest of the pass still reads the cache
        while not isinstance(next(generation), TokenEvent):
            pass
        assert generation.release_cache()  # between passes it can
    finally:
        runner.timing.pacing = None
        generation.close()

"""The repetition penalty (a request's ``repetition_penalty`` or its tier's) against mlx-lm's
own: its processor over the completion's last 64 tokens, in mlx-lm's eager loop. SmolLM2
asked to repeat an emoji loops on it; penalized, it writes what that reference writes, also
where lookup drafting verifies many tokens in one pass (a loop is what it drafts best)."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_logits_processors

from gateway.config import default_cache_dir
from gateway.engines.device import choose_compute_path
from gateway.engines.mlx_runner import MLXRunner
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.seam.backend import Finished, SamplingParams, TokenEvent

LOOP = "Repeat after me: " + "\U0001f680" * 20
TOKENS = 48
PENALIZED = SamplingParams(max_tokens=TOKENS, temperature=0.0, repetition_penalty=1.3)


@pytest.fixture(scope="module", params=["lookup", "off"])
def runner(request: pytest.FixtureRequest) -> MLXRunner:
    made = MLXRunner(
        "m", ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID), choose_compute_path()
    )
    made.speculation = request.param
    return made


def generated(runner: MLXRunner, prompt: list[int], params: SamplingParams) -> list[int]:
    events = runner.generate(prompt, params)
    return [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]


def reference(runner: MLXRunner, prompt: list[int], penalty: float) -> list[int]:
    """mlx-lm's loop with mlx-lm's processor, shown the completion only (OpenAI's penalties
    and the gateway's count no prompt token)."""
    (processor,) = make_logits_processors(repetition_penalty=penalty, repetition_context_size=64)
    steps = generate_step(
        mx.array(prompt),
        runner.model,
        max_tokens=TOKENS,
        logits_processors=[lambda tokens, logits: processor(tokens[len(prompt) :], logits)],
        prompt_cache=runner.new_cache(),
    )
    tokens = []
    for token, _ in steps:
        tokens.append(int(token))
        if tokens[-1] in runner.eos_token_ids:
            break
    return tokens


def test_a_penalized_loop_writes_what_mlx_lms_processor_writes(runner: MLXRunner) -> None:
    prompt = runner.render_chat([{"role": "user", "content": LOOP}])
    plain = generated(runner, prompt, SamplingParams(max_tokens=TOKENS, temperature=0.0))
    events = list(runner.generate(prompt, PENALIZED))
    penalized = [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]
    assert penalized == reference(runner, prompt, 1.3)
    assert penalized != plain  # the penalty changed the reply: the comparison means something
    finished = events[-1]
    assert isinstance(finished, Finished)
    if runner.speculation == "lookup":  # verifying passes saw the penalty too
        assert finished.drafted is not None and finished.drafted.accepted > 0


@pytest.mark.parametrize("done", [5, 20])
def test_a_resumed_generation_keeps_the_penalty_over_what_came_before(
    runner: MLXRunner, done: int
) -> None:
    """Tokens generated elsewhere (a served speculation, a failed-over peer) end the prompt
    of the generation that goes on: its penalty counts them as the completion's."""
    prompt = runner.render_chat([{"role": "user", "content": LOOP}])
    whole = generated(runner, prompt, PENALIZED)
    rest = runner.generate(
        prompt + whole[:done], replace(PENALIZED, max_tokens=TOKENS - done), resumed=done
    )
    assert [t for e in rest if isinstance(e, TokenEvent) for t in e.token_ids] == whole[done:]

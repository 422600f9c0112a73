"""The compiled decode step (``gateway.engines.compiled_step``) against mlx-lm's own eager
decode (``generate_step``): the same tokens, greedy and seeded, through the runner's whole
decode loop, for the real SmolLM2 and for synthetic models of the architectures the gateway
loads, across a growth of the KV buffer; models it cannot take stay eager and say why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from gateway.config import default_cache_dir
from gateway.engines.compiled_step import CompiledStep, capacity_for, make_room
from gateway.engines.device import choose_compute_path
from gateway.engines.draft_model import DraftModel
from gateway.engines.mlx_runner import MLXRunner
from gateway.engines.sampling import make_job_sampler
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.seam.backend import SamplingParams, TokenEvent
from testsupport.synthetic import SyntheticSpec, build_synthetic

# A prompt of 250 tokens fills its buffer to 256 (mlx-lm's step): the decode that follows
# grows it while the compiled step writes.
PROMPT_TOKENS = 250
TOKENS = 24


def prompt_of(runner: MLXRunner) -> list[int]:
    text = " ".join(f"line {n}: the keeper climbs the stairs." for n in range(60))
    tokens = runner.render_chat([{"role": "user", "content": text}])
    assert len(tokens) >= PROMPT_TOKENS
    return tokens[-PROMPT_TOKENS:]


def generated(runner: MLXRunner, prompt: list[int], params: SamplingParams) -> list[int]:
    events = runner.generate(prompt, params)
    return [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]


def reference(runner: MLXRunner, prompt: list[int], params: SamplingParams) -> list[int]:
    """mlx-lm's eager loop, drawing with the job's own sampler (the same seeded keys)."""
    steps = generate_step(
        mx.array(prompt),
        runner.model,
        max_tokens=params.max_tokens,
        sampler=make_job_sampler(params),
        prompt_cache=runner.new_cache(),
    )
    return [int(token) for token, _ in steps]


def runner_for(folder: Path) -> MLXRunner:
    made = MLXRunner("m", folder, choose_compute_path())
    made.speculation = "off"  # each token from a step: the step is what is compared
    return made


@pytest.fixture(scope="module")
def smollm2() -> MLXRunner:
    return runner_for(ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID))


PARAMS = (
    SamplingParams(max_tokens=TOKENS, temperature=0.0),
    SamplingParams(max_tokens=TOKENS, temperature=0.9, top_p=0.95, seed=11),
)


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "seeded"])
def test_the_real_models_compiled_steps_give_generate_steps_tokens(
    smollm2: MLXRunner, params: SamplingParams
) -> None:
    assert smollm2.decode_step == {"compiled": True, "reason": "compiled"}
    prompt = prompt_of(smollm2)
    assert generated(smollm2, prompt, params) == reference(smollm2, prompt, params)


def test_the_steps_are_the_compiled_ones(smollm2: MLXRunner) -> None:
    """A runner's decode loop calls the compiled step once per token after the first."""
    calls = []
    compiled = smollm2.compiled_step
    assert compiled is not None

    class Counted(CompiledStep):
        def __call__(self, token: mx.array, cache: Any) -> mx.array:
            calls.append(cache[0].offset)
            return compiled(token, cache)

    smollm2.compiled_step = Counted(smollm2.model)
    try:
        prompt = prompt_of(smollm2)
        tokens = generated(smollm2, prompt, SamplingParams(max_tokens=TOKENS, temperature=0.0))
    finally:
        smollm2.compiled_step = compiled
    # Each step feeds the token before it, at the next position (one past the last too:
    # the cache then holds every token, for the prefix store).
    assert calls == list(range(PROMPT_TOKENS, PROMPT_TOKENS + len(tokens)))


def test_a_buffer_grows_in_few_sizes_keeping_what_it_holds() -> None:
    assert [capacity_for(n) for n in (1, 256, 257, 2047, 2048, 2049, 4097, 32769)] == [
        256,
        256,
        512,
        2048,
        2048,
        2304,
        4608,
        36864,
    ]
    # Past 2,048 tokens at most eight sizes per doubling, the unwritten tail under 1/8.
    sizes = {capacity_for(n) for n in range(4097, 8193)}
    assert len(sizes) == 8
    assert all((capacity_for(n) - n) / capacity_for(n) < 1 / 8 for n in range(2048, 40000, 7))
    cache = make_prompt_cache(_tiny_model())
    for layer in cache:
        layer.update_and_fetch(mx.ones((1, 2, 300, 32)), mx.full((1, 2, 300, 32), 2.0))
        layer.trim(40)  # 260 held, 512 in the buffer
    make_room(cache, 600)
    for layer in cache:
        assert layer.keys.shape[2] == capacity_for(600) == 768 and layer.offset == 260
        assert mx.all(layer.keys[..., :260, :] == 1).item()
        assert mx.all(layer.values[..., :260, :] == 2).item()
        assert mx.all(layer.keys[..., 260:, :] == 0).item()


def _tiny_model() -> Any:
    from mlx_lm.models import llama

    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        vocab_size=64,
    )
    return llama.Model(args)


@pytest.mark.parametrize(
    ("architecture", "dtype"),
    [
        ("llama", "float32"),
        ("qwen2", "float32"),
        ("qwen3", "float32"),
        ("mistral", "bfloat16"),
        ("qwen3_moe", "float32"),
    ],
)
def test_synthetic_architectures_compile_and_give_generate_steps_tokens(
    tmp_path: Path, architecture: str, dtype: str
) -> None:
    folder = build_synthetic(SyntheticSpec(architecture, dtype=dtype), tmp_path / architecture)
    runner = runner_for(folder)
    assert runner.decode_step["compiled"], runner.decode_step
    prompt = prompt_of(runner)
    for params in PARAMS:
        assert generated(runner, prompt, params) == reference(runner, prompt, params)


def test_a_sliding_window_model_stays_eager_and_says_why(tmp_path: Path) -> None:
    folder = build_synthetic(SyntheticSpec("gemma3"), tmp_path / "gemma3")
    runner = runner_for(folder)
    assert runner.compiled_step is None
    assert runner.decode_step["compiled"] is False
    assert "RotatingKVCache" in runner.decode_step["reason"]
    prompt = prompt_of(runner)
    assert generated(runner, prompt, PARAMS[0]) == reference(runner, prompt, PARAMS[0])


class ReadsItsPosition:
    """A model whose layers read the cache's offset as a number (a branch on it): it
    cannot be traced with the offset as an array."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.layers = model.layers

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        if cache[0].offset > 1_000_000:
            raise AssertionError("never this long")
        return self.model(inputs, cache=cache)


def test_a_model_that_reads_its_position_as_a_number_stays_eager() -> None:
    model = _tiny_model()
    mx.eval(model.parameters())
    step, reason = CompiledStep.probe(ReadsItsPosition(model), 1)
    assert step is None
    assert reason.startswith("eager: its layers cannot be compiled"), reason
    # The same layers read as a model should be: compiled.
    step, reason = CompiledStep.probe(model, 1)
    assert step is not None and reason == "compiled"


class MisplacesItsKeys:
    """A model whose cache writes land one position off under a compiled step: the probe's
    logits differ from the eager step's."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.layers = model.layers

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        for layer in cache:
            if not isinstance(layer.offset, int):  # the compiled step's views
                layer.offset = layer.offset + 3
        return self.model(inputs, cache=cache)


def test_a_compiled_step_that_differs_from_the_eager_one_is_refused() -> None:
    model = _tiny_model()
    mx.eval(model.parameters())
    step, reason = CompiledStep.probe(MisplacesItsKeys(model), 1)
    assert step is None
    assert reason.startswith("eager: the compiled step's logits differ"), reason


def test_the_setting_keeps_the_step_eager() -> None:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    runner = MLXRunner("m", folder, choose_compute_path(), decode_step="eager")
    assert runner.compiled_step is None
    assert runner.decode_step == {
        "compiled": False,
        "reason": "eager: the tier's decode_step setting",
    }


def test_a_draft_models_guesses_are_the_same_compiled(smollm2: MLXRunner) -> None:
    """The draft model's own steps compiled (SmolLM2 drafting for itself): the same guesses
    as its eager steps, on the same history."""
    compiled, _ = CompiledStep.probe(smollm2.model, 1)
    assert compiled is not None
    history = prompt_of(smollm2)
    eager_guesses = DraftModel(smollm2.model).propose(history, 8)
    drafter = DraftModel(smollm2.model, compiled=compiled)
    assert drafter.propose(history, 8) == eager_guesses
    # The next proposal, after three guesses kept and the model's own token (not the
    # fourth guess): its cache is cut back to them and continues compiled.
    history = [*history, *eager_guesses[:3], (eager_guesses[3] + 1) % 1000]
    assert drafter.propose(history, 8) == DraftModel(smollm2.model).propose(history, 8)


def test_a_batchs_compiled_steps_give_its_eager_steps_tokens(smollm2: MLXRunner) -> None:
    """Three sequences of different lengths decoding as a batch (left-padded), compiled and
    eager on the same caches: each row the same greedy tokens, step after step, while the
    buffer grows past 256 and after a sequence leaves (its rows dropped, the common padding
    cut: a buffer of another size)."""
    from mlx_lm.models.cache import BatchKVCache

    from gateway.engines.batch_decode import _keep_rows
    from gateway.engines.compiled_step import batch_problem

    model = smollm2.model
    compiled = smollm2.compiled_step
    assert compiled is not None and batch_problem(compiled, model) is None
    prompt = prompt_of(smollm2)
    prompts = [prompt[:30], prompt[:248], prompt[:120]]
    batches = []
    for _ in range(2):
        caches = [smollm2.new_cache() for _ in prompts]
        for tokens, cache in zip(prompts, caches, strict=True):
            mx.eval(model(mx.array([tokens]), cache=cache))
        batches.append([BatchKVCache.merge([c[i] for c in caches]) for i in range(len(caches[0]))])
    eager, together = batches
    tokens = mx.array([[42], [43], [44]])
    rows, grown = [0, 1, 2], False
    for step in range(24):
        if step == 12:  # the longest leaves: the others' common padding is cut
            rows = [0, 2]
            tokens = tokens[mx.array(rows)]
            for cache in (eager, together):
                unused = cache[0]._idx - (120 + 12)
                for layer in cache:
                    _keep_rows(layer, [0, 2], unused)
        want = model(tokens, cache=eager)[:, -1, :]
        got = compiled.batched(tokens, together)
        grown = grown or together[0].keys.shape[2] > 256
        assert mx.argmax(want, axis=-1).tolist() == mx.argmax(got, axis=-1).tolist(), step
        assert mx.allclose(want, got, atol=1e-3, rtol=1e-3).item(), step
        tokens = mx.argmax(want, axis=-1)[:, None]
    assert grown
    assert together[0].keys is not None and together[0].keys.shape[2] == capacity_for(
        together[0]._idx
    )


def test_a_runner_that_batches_hands_its_batch_the_compiled_step() -> None:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    runner = MLXRunner("m", folder, choose_compute_path(), max_batch=4)
    assert runner.batch.compiled is runner.compiled_step is not None
    assert runner.decode_step == {"compiled": True, "reason": "compiled", "batch_compiled": True}


def test_a_drafts_verifying_passes_are_compiled_and_keep_generate_steps_tokens(
    smollm2: MLXRunner,
) -> None:
    """Prompt lookup on a reply that copies its prompt: the drafts are verified by the
    compiled pass (several tokens at once, the rejected trimmed from the buffer and written
    over by the next pass) and the greedy tokens are still mlx-lm's."""
    lines = "\n".join(f"item_{n} = compute_value({n}, scale={n * 3})" for n in range(12))
    prompt = smollm2.render_chat([{"role": "user", "content": f"Repeat exactly:\n{lines}"}])
    params = SamplingParams(max_tokens=48, temperature=0.0)
    lengths: list[int] = []
    compiled = smollm2.compiled_step
    assert compiled is not None

    class Counted(CompiledStep):
        def __call__(self, tokens: mx.array, cache: Any) -> mx.array:
            lengths.append(tokens.shape[0])
            return compiled(tokens, cache)

    smollm2.compiled_step = Counted(smollm2.model)
    smollm2.speculation = "lookup"
    smollm2.timing.seconds_per_step = 1.0  # drafting pays, as far as it can tell
    try:
        assert generated(smollm2, prompt, params) == reference(smollm2, prompt, params)
    finally:
        smollm2.compiled_step, smollm2.speculation = compiled, "off"
    assert max(lengths) > 1 and lengths.count(1) < len(lengths)


def test_the_traces_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_TRACES`` shapes the traces are dropped (new compiled functions) and the
    steps go on, still right."""
    import gateway.engines.compiled_step as compiled_step

    monkeypatch.setattr(compiled_step, "MAX_TRACES", 3)
    model = _tiny_model()
    mx.eval(model.parameters())
    step = CompiledStep(model)
    eager, compiled = make_prompt_cache(model), make_prompt_cache(model)
    prompt = mx.array([[1, 2, 3, 4]])
    mx.eval(model(prompt, cache=eager), model(prompt, cache=compiled))
    for n in (1, 2, 3, 4, 5, 1):  # six shapes, five of them new
        tokens = mx.array(list(range(5, 5 + n)))
        want = model(tokens[None], cache=eager)[0]
        assert mx.allclose(step(tokens, compiled), want, atol=1e-4).item(), n
        assert len(step.traces) <= 3
    assert step.renewals == 1  # the fourth new shape renewed them; 5 and 1 fit after it

"""Batched decode on the real SmolLM2 (issue 33): sequences decoding together get the tokens
each gets alone (greedy, and seeded sampling draw for draw), with their own grammar, stops
and penalties; a sequence that ends, is closed or is set aside leaves the batch, and one set
aside resumes where it was; the cache each leaves behind holds exactly its tokens. Every
test checks that steps were batched, so that none passes with batching silently off."""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache, KVCache

from gateway.config import default_cache_dir
from gateway.engines import mlx_runner
from gateway.engines.batch_decode import BatchDecoder, BatchLimit, batch_capacity, batch_problem
from gateway.engines.device import choose_compute_path
from gateway.engines.mlx_runner import MLXGeneration, MLXRunner
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.scheduler.pacing import PASS_POINT
from gateway.seam.backend import Finished, SamplingParams, TokenEvent
from gateway.seam.request_parts import Grammar
from tests.unit.engines.test_speculative_decode import Grained

QUESTIONS = [
    "Tell me about cats.",
    "What is 2+2? Explain it at length, step by step.",
    "Write a poem about the sea.",
    "List five fruits and say why each is good for you.",
    "Repeat the word blue ten times.",
]


@pytest.fixture(scope="module")
def runner() -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    loaded = MLXRunner(DEFAULT_MODEL_ID, folder, choose_compute_path(), max_batch=8)
    # The passes queued ahead as on a GPU (the harder path: a pass in flight whenever a
    # sequence joins, leaves or is set aside); a CPU's unqueued passes in one test below.
    loaded.batch.queue_ahead = True
    return loaded


def prompt(runner: MLXRunner, question: str) -> list[int]:
    return runner.render_chat([{"role": "user", "content": question}])


def alone(runner: MLXRunner, tokens: list[int], params: SamplingParams) -> list[int]:
    generation = runner.generate(tokens, params)
    return [t for event in generation if isinstance(event, TokenEvent) for t in event.token_ids]


def in_turn(
    generations: Sequence[Iterator[Any]], on_token: Any = None, on_pass_point: Any = None
) -> tuple[list[list[int]], list[Finished | None]]:
    """Advance each generation a token at a time, in turn, as the slot does."""
    out: list[list[int]] = [[] for _ in generations]
    finished: list[Finished | None] = [None] * len(generations)
    live = set(range(len(generations)))
    while live:
        for i in sorted(live):
            for event in generations[i]:
                if event is PASS_POINT and on_pass_point is not None:
                    on_pass_point(i)
                if isinstance(event, Finished):
                    finished[i] = event
                if isinstance(event, TokenEvent | Finished):
                    break
            else:
                live.discard(i)
                continue
            if isinstance(event, TokenEvent):
                out[i].extend(event.token_ids)
                if on_token is not None:
                    on_token(i, len(out[i]))
    return out, finished


def batched_steps(runner: MLXRunner) -> tuple[int, int]:
    return runner.batch.steps, runner.batch.sequence_steps


def test_greedy_and_seeded_sequences_decode_together_as_alone(runner: MLXRunner) -> None:
    params = [
        SamplingParams(max_tokens=24, temperature=0.0),
        SamplingParams(max_tokens=24, temperature=0.9, seed=5),
        SamplingParams(max_tokens=24, temperature=0.0, frequency_penalty=0.8),
        SamplingParams(max_tokens=24, temperature=0.0, repetition_penalty=1.3),
        SamplingParams(max_tokens=24, temperature=0.7, top_p=0.9, seed=9),
    ]
    prompts = [prompt(runner, q) for q in QUESTIONS]
    reference = [alone(runner, p, s) for p, s in zip(prompts, params, strict=True)]
    steps, sequence_steps = batched_steps(runner)
    together, _ = in_turn([runner.generate(p, s) for p, s in zip(prompts, params, strict=True)])
    assert together == reference
    steps, sequence_steps = runner.batch.steps - steps, runner.batch.sequence_steps - sequence_steps
    assert steps > 0 and sequence_steps / steps > 3, "the four should have decoded together"
    assert runner.batch.size == 0 and not runner.batch.decoding  # all left


@pytest.mark.parametrize("queue_ahead", [True, False], ids=["gpu", "cpu"])
def test_plain_greedy_rows_drawn_together_and_passes_queued_ahead_keep_the_tokens(
    runner: MLXRunner, queue_ahead: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows drawn alike (greedy, no processors) are drawn in one go, beside a sampled row
    and a penalized one; as on a GPU, every pass after the first is queued before the
    tokens of the one before are read (on a CPU none is). Each sequence still gets the
    tokens it gets alone."""
    monkeypatch.setattr(runner.batch, "queue_ahead", queue_ahead)
    greedy = SamplingParams(max_tokens=30, temperature=0.0)
    params = [
        greedy,
        SamplingParams(max_tokens=30, temperature=0.8, seed=3),
        greedy,
        SamplingParams(max_tokens=30, temperature=0.0, presence_penalty=0.5),
    ]
    prompts = [prompt(runner, q) for q in QUESTIONS[:4]]
    reference = [alone(runner, p, s) for p, s in zip(prompts, params, strict=True)]
    ahead, steps = runner.batch.passes_ahead, runner.batch.steps
    together, _ = in_turn([runner.generate(p, s) for p, s in zip(prompts, params, strict=True)])
    assert together == reference
    ahead, steps = runner.batch.passes_ahead - ahead, runner.batch.steps - steps
    # A pass is computed at once only where a sequence joined (no pass in flight for it).
    assert steps > 20
    assert ahead >= steps - len(params) if queue_ahead else ahead == 0


def test_grammar_and_stop_each_hold_in_the_batch(runner: MLXRunner) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    json_params = SamplingParams(
        max_tokens=40, temperature=0.0, grammar=Grammar("json_schema", json.dumps(schema))
    )
    stop_params = SamplingParams(max_tokens=40, temperature=0.0, stop=("cat",))
    prompts = [
        prompt(runner, "Describe a person as JSON."),
        prompt(runner, QUESTIONS[0]),
        prompt(runner, QUESTIONS[1]),
    ]
    generations = [
        runner.generate(prompts[0], json_params),
        runner.generate(prompts[1], stop_params),
        runner.generate(prompts[2], SamplingParams(max_tokens=40, temperature=0.0)),
    ]
    before = batched_steps(runner)
    together, finished = in_turn(generations)
    assert batched_steps(runner) != before
    assert together[0] == alone(runner, prompts[0], json_params)
    parsed = json.loads(runner.tokenizer.decode(together[0]))
    assert set(parsed) == {"name", "age"}
    assert together[1] == alone(runner, prompts[1], stop_params)
    assert finished[1] is not None and finished[1].reason == "stop"
    assert together[2] == alone(runner, prompts[2], SamplingParams(max_tokens=40, temperature=0.0))
    for generation, tokens in zip(generations, together, strict=True):
        assert isinstance(generation, MLXGeneration) and generation.state is not None
        # The cache left behind holds exactly the tokens it says (the prompt and all but
        # at most the last token, or all and the end token that ended the reply: the
        # batch's next pass is queued before a token is read), and is a plain one again.
        state, held = generation.state, [*generation.prompt, *tokens]
        beyond = list(state.tokens[len(held) :])
        assert list(state.tokens[: len(held)]) == held[: len(state.tokens)]
        assert beyond == [] or (len(beyond) == 1 and beyond[0] in runner.eos_token_ids)
        assert len(state.tokens) >= len(held) - 1
        assert runner.cache_length(state.cache) == len(state.tokens)
        assert all(type(layer) is KVCache and layer.keys is not None for layer in state.cache)


def test_closed_and_set_aside_sequences_leave_and_resume(runner: MLXRunner) -> None:
    params = SamplingParams(max_tokens=30, temperature=0.8, seed=21)
    prompts = [prompt(runner, q) for q in QUESTIONS[:3]]
    reference = [alone(runner, p, params) for p in prompts]
    generations = [runner.generate(p, params) for p in prompts]
    seen: dict[str, int] = {}

    def on_token(i: int, count: int) -> None:
        seen["largest"] = max(seen.get("largest", 0), runner.batch.size)
        if i == 2 and count == 6:
            generations[2].close()  # cancelled: it leaves at once
            assert runner.batch.size == 2 and len(runner.batch.decoding) == 2
        if i == 1 and count == 10:
            # Paused: out of the batch, its rows its own again (the batch of one left
            # dissolves); on its next turn it resumes, joining again.
            generations[1].set_aside()
            assert runner.batch.size == 0 and len(runner.batch.decoding) == 1

    together, _ = in_turn(generations, on_token)
    assert seen["largest"] == 3
    assert together[:2] == reference[:2]
    assert together[2] == reference[2][:6]
    assert runner.batch.size == 0 and not runner.batch.decoding


def test_a_sequence_whose_processors_fail_fails_alone(runner: MLXRunner) -> None:
    params = SamplingParams(max_tokens=20, temperature=0.0)
    prompts = [prompt(runner, q) for q in QUESTIONS[:3]]
    reference = [alone(runner, p, params) for p in prompts]
    generations = [runner.generate(p, params) for p in prompts]
    out: list[list[int]] = [[], [], []]
    failed: list[BaseException] = []

    def broken(seen: mx.array, logits: mx.array) -> mx.array:  # a processor, as a grammar's
        raise RuntimeError("the grammar rejected the state")

    live = {0, 1, 2}
    while live:
        for i in sorted(live):
            try:
                event = next(e for e in generations[i] if isinstance(e, TokenEvent | Finished))
            except StopIteration:
                live.discard(i)
                continue
            except RuntimeError as exc:
                failed.append(exc)
                live.discard(i)
                continue
            if isinstance(event, TokenEvent):
                out[i].extend(event.token_ids)
                loop = generations[i]._loop
                if i == 1 and len(out[1]) == 5 and runner.batch.size == 3:
                    assert loop is not None
                    loop.processors = [broken]  # its next draw fails
    assert len(failed) == 1 and "grammar" in str(failed[0])
    assert out[0] == reference[0] and out[2] == reference[2]
    assert out[1] == reference[1][: len(out[1])]
    assert runner.batch.size == 0 and not runner.batch.decoding


def test_a_batch_paused_inside_its_pass_resumes_with_the_same_tokens(runner: MLXRunner) -> None:
    """A user arriving pauses the whole background batch inside a step's pass: each sequence
    leaves with its draw unread, and resumes (joining again) with the tokens it gets alone."""
    params = [
        SamplingParams(max_tokens=20, temperature=0.0),
        SamplingParams(max_tokens=20, temperature=0.9, seed=2),
        SamplingParams(max_tokens=20, temperature=0.0),
    ]
    prompts = [prompt(runner, q) for q in QUESTIONS[:3]]
    reference = [alone(runner, p, s) for p, s in zip(prompts, params, strict=True)]
    generations = [runner.generate(p, s) for p, s in zip(prompts, params, strict=True)]
    paused: list[int] = []

    def pause_all(i: int) -> None:
        if not paused and runner.batch.size == 3 and runner.batch.steps > 4:
            paused.append(i)
            for generation in generations:  # the one inside the pass, the others between
                generation.set_aside()
            assert runner.batch.size == 0 and not runner.batch.decoding

    runner.timing.pacing, runner.timing.seconds_per_step = Grained(), 1.0
    try:
        together, _ = in_turn(generations, on_pass_point=pause_all)
    finally:
        runner.timing.pacing = None
    assert paused, "no batched pass was computed in stages"
    assert together == reference


def test_the_capacity_follows_the_setting_the_memory_and_the_model(runner: MLXRunner) -> None:
    assert batch_capacity(runner, 1, None) == BatchLimit(1, "setting", 0)
    per_token = batch_capacity(runner, 8, None).kv_bytes_per_token
    assert per_token == runner.batch.limit.kv_bytes_per_token > 0
    three = per_token * runner.context_length * 3
    assert batch_capacity(runner, 8, three) == BatchLimit(3, "memory", per_token)
    assert batch_capacity(runner, 2, three).limited_by == "setting"
    assert batch_problem(runner.model, runner.new_cache) is None

    class Unbatchable:  # attention that ignores the batch's padding: every row the first's
        def __init__(self, model: Any) -> None:
            self.model = model

        def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
            logits = self.model(inputs, cache=cache)
            return mx.broadcast_to(logits[:1], logits.shape) if logits.shape[0] > 1 else logits

    assert batch_problem(Unbatchable(runner.model), runner.new_cache) is not None
    decoder = BatchDecoder(runner.model, BatchLimit(1, "setting", 0))
    assert not decoder.enter(object())  # type: ignore[arg-type]


def test_a_gpu_runner_warms_up_by_generating_with_its_batch_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the load-time warm-up generates (to compile serving's shapes), and every
    generation's decode loop holds the runner's batch: it must exist before the warm-up
    (a runner that built it afterwards could not load on CUDA or Metal at all). Run here
    as a GPU runner on this machine's CPU, with a short chunk (the warm-up prefills one)."""
    monkeypatch.setitem(mlx_runner.PREFILL_CHUNK_TOKENS, "cuda", 16)
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    as_gpu = dataclasses.replace(choose_compute_path(), device="cuda")
    gpu_runner = MLXRunner(DEFAULT_MODEL_ID, folder, as_gpu, max_batch=4)
    assert gpu_runner.batch.capacity == 4
    assert gpu_runner.batch.size == 0  # the warm-up's generations left nothing behind


class _Sequence:
    """The part of a decode loop the batch holds (its cache, its undelivered draws)."""

    def __init__(self, cache: list[KVCache]) -> None:
        self.cache = cache
        self.ready: deque[Any] = deque()
        self.plain_greedy = True


def test_leaving_gives_each_its_rows_without_reading_the_device(
    runner: MLXRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sequences of different lengths (left-padded rows) leave one by one, the longest
    first (the rest's common padding is dropped), then the last (the batch dissolves):
    each gets exactly the rows mlx-lm's ``BatchKVCache.extract`` gives, though neither it
    nor ``filter`` (which read the padding back from the device, a wait behind the pass in
    flight at every layer) is called."""
    batch = BatchDecoder(runner.model, BatchLimit(8, "setting", 0), queue_ahead=False)
    sequences = []
    for length in (5, 9, 3):
        cache = runner.new_cache()
        runner.model(mx.array([list(range(1, length + 1))]), cache=cache)
        sequences.append(_Sequence(cache))
    for sequence in sequences:
        batch._join(sequence, 7)  # type: ignore[arg-type]
    batch._build(list(batch.seats))
    mx.eval([seat.drawing[0] for seat in batch.seats])  # type: ignore[index]
    assert batch.cache is not None
    expected = [[layer.extract(row) for layer in batch.cache] for row in range(3)]

    def refused(*_: object) -> None:
        raise AssertionError("read the device")

    monkeypatch.setattr(BatchKVCache, "extract", refused)
    monkeypatch.setattr(BatchKVCache, "filter", refused)
    for index in (1, 0):  # the longest first: the two left share padding, dropped
        batch._extract([next(s for s in batch.seats if s.loop is sequences[index])])
    assert batch.cache is not None and batch.cache[0]._idx == 3 + 1
    batch._extract(list(batch.seats))  # the last one left (a batch of one dissolves)
    assert batch.cache is None and not batch.seats
    for index, sequence in enumerate(sequences):
        for own, want in zip(sequence.cache, expected[index], strict=True):
            assert own.offset == want.offset == (5, 9, 3)[index] + 1
            assert mx.array_equal(own.keys, want.keys) and mx.array_equal(own.values, want.values)

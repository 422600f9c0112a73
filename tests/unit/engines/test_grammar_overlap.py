"""The grammar's mask off the critical path (issue 32 item 2): ``GrammarConstraint`` starts
the pass behind the logits before computing the next token's mask on the host, and the
output stays what masking each token's logits after the pass gives. The reference is written
here from mlx-lm's model and llguidance's matcher directly: pass, wait, mask, argmax, consume,
one token at a time."""

from __future__ import annotations

import json
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from gateway.config import default_cache_dir
from gateway.engines.constrained import make_llg_tokenizer
from gateway.engines.device import choose_compute_path
from gateway.engines.mlx_runner import MLXRunner
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.seam.backend import SamplingParams, TokenEvent
from gateway.seam.grammar import grammar_text
from gateway.seam.request_parts import Grammar

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "legs": {"type": "integer"},
        "colours": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "legs", "colours"],
    "additionalProperties": False,
}
GRAMMAR = Grammar("json_schema", json.dumps(SCHEMA))
TOKENS = 40


@pytest.fixture(scope="module")
def runner() -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    made = MLXRunner(DEFAULT_MODEL_ID, folder, choose_compute_path())
    made.speculation = "off"  # each token a step of its own: the overlap is per step
    return made


def prompt_of(runner: MLXRunner) -> list[int]:
    return runner.render_chat([{"role": "user", "content": "Describe a cat as JSON."}])


def masked_one_at_a_time(runner: MLXRunner, prompt: list[int]) -> list[int]:
    """Greedy tokens under the grammar, the mask computed after each pass has finished."""
    from llguidance import LLMatcher
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    llg = make_llg_tokenizer(
        runner.folder / "tokenizer.json", runner.vocab_size, sorted(runner.eos_token_ids)
    )
    matcher = LLMatcher(llg, grammar_text(GRAMMAR))
    bitmask = allocate_token_bitmask(1, runner.vocab_size)
    cache = runner.new_cache()
    logits = runner.model(mx.array([prompt]), cache=cache)[0, -1]
    tokens: list[int] = []
    while len(tokens) < TOKENS:
        mx.eval(logits)
        fill_next_token_bitmask(matcher, bitmask)
        allowed = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[: runner.vocab_size]
        masked = mx.where(mx.array(allowed.astype(bool)), logits, -mx.inf)
        token = int(mx.argmax(masked).item())
        tokens.append(token)
        if token in runner.eos_token_ids:
            break
        matcher.consume_token(token)
        logits = runner.model(mx.array([[token]]), cache=cache)[0, -1]
    return tokens


def test_the_overlapped_mask_gives_the_one_at_a_time_output(
    runner: MLXRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llguidance.numpy

    events: list[tuple[str, Any]] = []
    queue, fill = mx.async_eval, llguidance.numpy.fill_next_token_bitmask

    def queued(*arrays: Any) -> None:
        events.append(("queued", [getattr(a, "shape", None) for a in arrays]))
        queue(*arrays)

    def filled(*args: Any) -> Any:
        events.append(("mask", None))
        return fill(*args)

    monkeypatch.setattr(mx, "async_eval", queued)
    monkeypatch.setattr(llguidance.numpy, "fill_next_token_bitmask", filled)
    prompt = prompt_of(runner)
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0, grammar=GRAMMAR)
    events_of = runner.generate(prompt, params)
    overlapped = [t for e in events_of if isinstance(e, TokenEvent) for t in e.token_ids]
    monkeypatch.undo()
    reference = masked_one_at_a_time(runner, prompt)
    assert overlapped == reference
    text = runner.tokenizer.decode(overlapped)
    assert text.lstrip().startswith("{") and '"legs": ' in text  # the schema's, masked
    # Every mask was computed with the pass behind its logits queued just before it (the
    # logits of one row of the vocabulary), not after the pass had been read.
    masks = [i for i, (kind, _) in enumerate(events) if kind == "mask"]
    # (One more than the tokens where the step past the last was queued ahead.)
    assert len(overlapped) <= len(masks) <= len(overlapped) + 1
    vocabulary_row = (1, runner.vocab_size)
    for index in masks:
        kind, shapes = events[index - 1]
        assert kind == "queued" and shapes == [vocabulary_row], events[index - 2 : index + 1]


def test_the_compiled_unpacking_allows_exactly_the_set_bits_and_never_the_padding() -> None:
    from gateway.engines.constrained import _apply_bits

    words = np.zeros(3, dtype=np.uint32)  # 96 bits for a vocabulary of 70
    words[0], words[2] = 0b1011, (1 << 5) | (1 << 20)  # tokens 0, 1, 3, 69 and 84 (past it)
    logits = mx.arange(80, dtype=mx.float32)[None]  # 10 padded logits past the vocabulary
    for _ in range(2):  # traced, then replayed
        allowed = np.isfinite(np.array(_apply_bits(logits, words, 70))).nonzero()[1]
        assert allowed.tolist() == [0, 1, 3, 69]

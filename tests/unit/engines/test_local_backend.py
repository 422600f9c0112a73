"""The local backend behind the request seam: a runner that needs no model (tokens are
characters, real mlx-lm KV caches), the real scheduler, residency and prefix store."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.engines.local import LocalBackend
from gateway.engines.prefix_disk import DiskPrefixes
from gateway.engines.prefix_store import PrefixCacheStore
from gateway.engines.residency import LocalModels, Resident
from gateway.engines.runner import PromptState
from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.metrics import GatewayMetrics
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.seam.backend import (
    BackendEvent,
    Finished,
    GenerationRequest,
    ModelLimits,
    Priority,
    SamplingParams,
    Started,
    TextPrompt,
    TokenEvent,
)
from gateway.seam.embedding import EmbeddingInput
from tests.unit.fake_runner import ANSWER, FakeGeneration, FakeRunner

SYSTEM = "You are a careful assistant who answers briefly."  # 48 characters: 48 tokens


def kv_cache(tokens: int) -> list[Any]:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    layer = KVCache()
    if tokens:
        rows = mx.zeros((1, 1, tokens, 2))
        layer.update_and_fetch(rows, rows)
    return [layer]


class CacheRunner(FakeRunner):
    """Records what it was asked; its generations end holding a KV cache of their prompt,
    as the MLX runner's do, and its prefill fills a real cache."""

    default_stop: tuple[str, ...] = ("<|end|>",)

    def __init__(self) -> None:
        self.rendered = 0
        self.generated: list[tuple[list[int], SamplingParams, PromptState | None, dict]] = []

    def render_chat(self, messages: Sequence[dict[str, Any]], **options: Any) -> list[int]:
        self.rendered += 1
        if any(m["content"] == "BOOM" for m in messages):
            raise ValueError("the template refused it")
        return super().render_chat(messages, **options)

    def new_cache(self) -> list[Any]:
        return kv_cache(0)

    def cache_length(self, cache: Any) -> int:
        return int(cache[0].offset)

    def prefill(self, tokens: Sequence[int], cache: Any) -> Iterator[int]:
        import mlx.core as mx

        rows = mx.zeros((1, 1, len(tokens), 2))
        cache[0].update_and_fetch(rows, rows)
        yield len(tokens)

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        state: PromptState | None = None,
        **options: Any,
    ) -> FakeGeneration:
        self.generated.append((list(prompt), params, state, options))
        generation = FakeGeneration(prompt, params)
        generation.cached_tokens = len(state.tokens) if state else 0
        events = list(generation)

        def run() -> Iterator[BackendEvent]:
            yield from events
            generation.state = PromptState(kv_cache(len(prompt)), tuple(prompt))  # type: ignore[arg-type]

        generation._events = run()
        return generation


@pytest.fixture
async def slot() -> AsyncIterator[Scheduler]:
    config = SchedulerConfig(max_queued={p: 8 for p in Priority}, max_queue_wait=5.0)
    scheduler = Scheduler(config, GatewayMetrics().scheduler)
    await scheduler.start()
    yield scheduler
    await scheduler.stop()


def make(
    slot: Scheduler,
    tiers: Sequence[str] = ("fast",),
    budget: int = 1000,
    disk: DiskPrefixes | None = None,
) -> tuple[list[LocalBackend], PrefixCacheStore, list[CacheRunner]]:
    models = LocalModels(slot, GatewayMetrics().residency, budget, lambda: {"active": 0, "peak": 0})
    store = PrefixCacheStore(1 << 30)
    runners: list[CacheRunner] = []

    def load() -> CacheRunner:
        runners.append(CacheRunner())
        return runners[-1]

    backends = []
    for name in tiers:
        resident = models.register(Resident(name, f"model-{name}", load, 100, 0))
        backends.append(LocalBackend(name, resident, models, slot, store, disk))
    return backends, store, runners


def chat(content: str, request_id: str = "r1", **params: Any) -> GenerationRequest:
    messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": content})
    return GenerationRequest(request_id, messages, SamplingParams(**params))


async def events_of(backend: LocalBackend, request: GenerationRequest) -> list[BackendEvent]:
    return [event async for event in backend.generate(request)]


async def test_a_chat_is_rendered_run_in_the_slot_and_answered(slot: Scheduler) -> None:
    [backend], _, runners = make(slot)
    assert backend.resident.state == "unloaded" and backend.limits().context_length is None
    events = await events_of(backend, chat("Hi", max_tokens=3))
    prompt = len(SYSTEM) + 2
    assert events[0] == Started(prompt, 0)
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == "hello from the"
    assert events[-1] == Finished("length", prompt, 3)
    # Loaded on first use, released after; the runner's own stop strings are added.
    assert backend.resident.state == "loaded" and backend.resident.in_use == 0
    assert backend.limits() == ModelLimits(4096, 256)
    _, params, state, options = runners[0].generated[0]
    assert params.stop == ("<|end|>",) and state is None
    assert options == {"continues_text": False, "resumed": 0}


async def test_a_second_chat_reuses_the_first_one_s_prompt_from_the_store(
    slot: Scheduler,
) -> None:
    [backend], store, runners = make(slot)
    await events_of(backend, chat("Hi"))
    events = await events_of(backend, chat("Hi there", "r2"))
    _, _, state, _ = runners[0].generated[1]
    first_prompt = len(SYSTEM) + 2
    assert state is not None and len(state.tokens) == first_prompt
    assert events[0] == Started(len(SYSTEM) + 8, first_prompt)
    assert len(store.entries("fast")) == 1  # the longer prompt replaced its prefix


async def test_a_raw_text_prompt_continues_its_text(slot: Scheduler) -> None:
    [backend], _, runners = make(slot)
    request = GenerationRequest("r1", (), SamplingParams(), text_prompt=TextPrompt("Once"))
    events = await events_of(backend, request)
    prompt, _, _, options = runners[0].generated[0]
    assert prompt == [ord(c) for c in "Once"] and options["continues_text"] is True
    assert events[-1] == Finished("stop", 4, len(ANSWER.split(" ")))


async def test_a_resumed_generation_feeds_what_was_generated_and_counts_it(
    slot: Scheduler,
) -> None:
    [backend], _, runners = make(slot)
    await events_of(backend, replace(chat("Hi", max_tokens=10), resume=(7, 8, 9)))
    prompt, params, _, options = runners[0].generated[0]
    assert prompt[-3:] == [7, 8, 9] and params.max_tokens == 7
    assert options["resumed"] == 3


async def test_a_prompt_too_long_for_any_tokenization_is_refused_before_rendering(
    slot: Scheduler,
) -> None:
    [backend], _, runners = make(slot)
    await events_of(backend, chat("warm up"))  # loads the runner
    with pytest.raises(ContextLengthExceededError):
        await events_of(backend, chat("x" * 5000))
    assert runners[0].rendered == 1 and len(runners[0].generated) == 1


async def test_a_template_refusal_is_a_400_naming_the_messages(slot: Scheduler) -> None:
    [backend], _, _ = make(slot)
    with pytest.raises(InvalidRequestError) as refused:
        await events_of(backend, chat("BOOM"))
    assert refused.value.param == "messages" and backend.resident.in_use == 0


async def test_a_typing_hint_s_prefill_is_kept_for_the_request(slot: Scheduler) -> None:
    [backend], store, runners = make(slot)
    fixed = await backend.render_fixed_prefix(
        [{"role": "system", "content": SYSTEM}], "Tell me about"
    )
    warmup = await backend.warm("h1", fixed)
    events = [event async for event in warmup.events()]
    assert events[0] == Started(len(fixed), 0) and warmup.completed
    assert [s.tokens for s in store.entries("fast")] == [fixed]
    await events_of(backend, chat("Tell me about MLX"))
    _, _, state, _ = runners[0].generated[0]
    assert state is not None and state.tokens == fixed


async def test_unloading_a_model_forgets_its_prompt_caches(slot: Scheduler) -> None:
    (a, b), store, _ = make(slot, ("a", "b"), budget=150)  # room for one model
    await events_of(a, chat("Hi"))
    assert len(store.entries("a")) == 1
    await events_of(b, chat("Hi"))  # a is unloaded to make room
    assert a.resident.state == "unloaded" and store.entries("a") == []
    assert len(store.entries("b")) == 1


async def test_embeddings_are_one_job_and_bad_inputs_are_named(slot: Scheduler) -> None:
    [backend], _, _ = make(slot)
    embeddings = await backend.embed(["ab", (1, 2, 3)])
    assert len(embeddings.vectors) == 2 and embeddings.prompt_tokens == 5
    bad_inputs: list[list[EmbeddingInput]] = [["ok", ""], ["ok", (1, 999)]]
    for bad in bad_inputs:
        with pytest.raises(InvalidRequestError) as refused:
            await backend.embed(bad)
        assert refused.value.param == "input[1]"


class WaitingRunner(CacheRunner):
    """Its generation waits after the first token until the test lets it go on."""

    def __init__(self) -> None:
        super().__init__()
        self.go_on = threading.Event()

    def generate(self, prompt: Sequence[int], params: SamplingParams, *_: Any, **__: Any) -> Any:
        go_on = self.go_on

        class Waiting(FakeGeneration):
            def __iter__(self) -> Iterator[BackendEvent]:
                yield TokenEvent("a", (1,))
                go_on.wait(10)
                yield TokenEvent("b", (2,))
                yield Finished("stop", len(prompt), 2)

        return Waiting(prompt, params)


async def test_abort_ends_a_running_request_and_knows_no_other(slot: Scheduler) -> None:
    [backend], _, _ = make(slot)
    runner = WaitingRunner()
    backend.resident.load = lambda: runner
    assert await backend.abort("nobody") is False
    stream = backend.generate(chat("Hi", "r7"))
    assert isinstance(await anext(stream), Started)
    assert await anext(stream) == TokenEvent("a", (1,))
    assert await backend.abort("r7") is True
    runner.go_on.set()
    rest = [event async for event in stream]
    assert not any(isinstance(e, Finished) for e in rest)
    assert await backend.abort("r7") is False  # no longer running
    health = await backend.health()
    assert (health.kind, health.model, health.loaded) == ("mlx", "model-fast", True)


async def test_caches_saved_at_shutdown_warm_the_first_request_after_a_restart(
    slot: Scheduler, tmp_path: Path
) -> None:
    [backend], _, _ = make(slot, disk=DiskPrefixes(tmp_path, 1 << 30))
    await events_of(backend, chat("What is MLX?"))
    # The conversation, and the end of its system message (a boundary that recurs) alone.
    assert await backend.persist() == 2
    lengths = sorted(len(e.tokens) for e in DiskPrefixes(tmp_path, 1 << 30).list())
    assert lengths == [len(SYSTEM), len(SYSTEM) + len("What is MLX?")]
    assert await backend.persist() == 0  # already there
    # A restart: a new store (empty) and a new index of the same folder.
    [again], store, runners = make(slot, disk=DiskPrefixes(tmp_path, 1 << 30))
    assert store.entries("fast") == []
    events = await events_of(again, chat("What is MLX? And JAX?"))
    _, _, state, _ = runners[0].generated[0]
    first_prompt = len(SYSTEM) + len("What is MLX?")
    assert state is not None and len(state.tokens) == first_prompt
    assert events[0] == Started(len(SYSTEM) + len("What is MLX? And JAX?"), first_prompt)


async def test_without_a_loaded_model_or_a_disk_nothing_is_persisted(
    slot: Scheduler, tmp_path: Path
) -> None:
    [backend], _, _ = make(slot, disk=DiskPrefixes(tmp_path, 1 << 30))
    assert await backend.persist() == 0  # never loaded
    [memory_only], _, _ = make(slot)
    await events_of(memory_only, chat("Hi"))
    assert await memory_only.persist() == 0

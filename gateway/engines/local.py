"""The local backend: a model on this Mac, in the one inference slot, behind the request seam.

It is the model runner (tokens in, KV cache, one thread) + the shared scheduler (every local
tier takes the same slot: one Mac, one inference) + the prefix KV-cache store + the memory
residency of its model (loaded on first use). Requests become slot jobs; each job's steps
run on the inference thread and come back as the seam's typed events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from gateway.engines.context_length import check_context_length
from gateway.engines.prefix_boundaries import RecurringPrefixes, system_boundary
from gateway.engines.prefix_disk import DiskPrefixes
from gateway.engines.prefix_store import PrefixCacheStore
from gateway.engines.residency import LocalModels, Resident
from gateway.engines.runner import Generation, ModelRunner, PromptState
from gateway.errors import InvalidRequestError
from gateway.scheduler.jobs import JobHandle, JobKind, JobSpec, JobState
from gateway.scheduler.pacing import JobStep, PassPoint
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import (
    BackendEvent,
    BackendHealth,
    BackendInfo,
    Capabilities,
    Described,
    Embedder,
    GenerationRequest,
    ModelLimits,
    PrefillProgress,
    Priority,
    Prompt,
    Started,
    TextPrompt,
    Warmer,
)
from gateway.seam.embedding import EmbeddingInput, Embeddings
from gateway.seam.request_parts import ChatMessage, ToolSpec

log = logging.getLogger(__name__)
T = TypeVar("T")


def fixed_prefix_tokens(
    runner: ModelRunner,
    messages: Sequence[ChatMessage],
    draft: str | None,
    tools: Sequence[ToolSpec] = (),
) -> list[int]:
    """Tokens of everything already fixed: the conversation, plus the draft's whole words.

    Without a draft: the chat template without a generation prompt. With one: the draft as
    an unfinished user message, cut before its last word, which may still grow and so
    tokenize differently.
    """
    words = (draft or "").rstrip()
    cut = max(words.rfind(" "), words.rfind("\n"))
    stable = words[:cut] if cut > 0 else ""
    if not stable.strip():
        return runner.render_chat(messages, tools=tools, add_generation_prompt=False)
    return runner.render_chat(
        [*messages, {"role": "user", "content": stable}],
        tools=tools,
        continue_final_message=True,
    )


class GenerationSteps:
    """A chat job's steps on the inference thread: ``Started``, then the generation's events.

    The generation starts at the first step (``start``: reuse a cached prefix, then
    generate); ``keep`` receives its final state. While the job is paused it offers the slot
    its KV cache (``HoldsMemory``), which it recomputes when it resumes.
    """

    def __init__(
        self,
        start: Callable[[], Generation],
        prompt_tokens: int,
        keep: Callable[[PromptState], None],
    ) -> None:
        self._generation: Generation | None = None
        self._steps = self._run(start, prompt_tokens, keep)

    def __iter__(self) -> Iterator[JobStep]:
        return self

    def __next__(self) -> JobStep:
        return next(self._steps)

    def close(self) -> None:
        self._steps.close()

    @property
    def holds_memory(self) -> bool:
        return self._generation is not None

    def release_memory(self) -> bool:
        return self._generation is not None and self._generation.release_cache()

    def set_aside(self) -> None:
        if self._generation is not None:
            self._generation.set_aside()

    def _run(
        self,
        start: Callable[[], Generation],
        prompt_tokens: int,
        keep: Callable[[PromptState], None],
    ) -> Generator[JobStep, None, None]:
        generation = self._generation = start()
        yield Started(prompt_tokens, generation.cached_tokens)
        try:
            yield from generation
        finally:
            if generation.state is not None:
                keep(generation.state)


class LocalWarmup:
    """A pre-prefill job of a typing hint (see ``gateway.seam.backend.Warmup``)."""

    def __init__(self, backend: LocalBackend, job: JobHandle) -> None:
        self.backend = backend
        self.job = job

    async def events(self) -> AsyncIterator[BackendEvent]:
        try:
            async for event in self.job.events():
                yield event
        finally:
            self.backend.models.release(self.backend.resident)

    def cancel(self) -> None:
        self.job.cancel()

    @property
    def completed(self) -> bool:
        return self.job.state is JobState.DONE


class LocalBackend:
    """One local tier (kind ``mlx``); its own warmer (typing hints) and embedder."""

    def __init__(
        self,
        tier: str,
        resident: Resident,
        models: LocalModels,
        scheduler: Scheduler,
        prefix_store: PrefixCacheStore,
        disk: DiskPrefixes | None = None,
    ) -> None:
        self.tier = tier
        self.disk = disk if disk is not None and disk.enabled else None
        self.resident = resident
        self.models = models
        self.scheduler = scheduler
        self.prefix_store = prefix_store
        # System messages seen lately: their end is saved to disk as an entry of its own.
        self.recurring = RecurringPrefixes()
        capabilities = Capabilities(
            prefix_cache=prefix_store.enabled,
            typing_hints=prefix_store.enabled,  # a warmed cache lives in the store
            token_ids=True,
            structured_output=True,  # llguidance in the runner
            logprobs=True,
            text_prompts=True,
            local_slot=True,
        )
        self.info = BackendInfo("mlx", tier, resident.model_id, capabilities)
        self._jobs: dict[str, JobHandle] = {}
        # Known after the first load; kept across unloads (the model does not change).
        self._limits = ModelLimits()

        def forget_caches() -> None:  # an unloaded model's KV caches are memory to return
            prefix_store.drop_model(tier)

        resident.on_unload.append(forget_caches)

    def limits(self) -> ModelLimits:
        return self._limits

    def warmer(self) -> Warmer | None:
        return self if self.info.capabilities.typing_hints else None

    def embedder(self) -> Embedder:
        return self

    def _learn_limits(self, runner: ModelRunner) -> None:
        self._limits = ModelLimits(runner.context_length, runner.vocab_size)

    # -- prompts -----------------------------------------------------------------------------

    async def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        thinking: bool | None = None,
    ) -> Prompt:
        described = sum(len(str(tool.parameters)) + len(tool.description or "") for tool in tools)

        def render(runner: ModelRunner) -> Prompt:
            tokens = runner.render_chat(messages, tools=tools, thinking=thinking)
            self._note_boundary(runner, messages, tools, tokens)
            return Prompt(tuple(tokens), runner.reply_format(tokens, thinking))

        return await self._with_runner(render, _characters(messages) + described)

    async def render_text(self, prompt: TextPrompt) -> Prompt:
        tokens = await self._with_runner(
            lambda runner: runner.render_text(prompt.text), len(prompt.text)
        )
        return Prompt(tuple(tokens))

    async def render_fixed_prefix(
        self, messages: Sequence[ChatMessage], draft: str | None, tools: Sequence[ToolSpec] = ()
    ) -> tuple[int, ...]:
        def render(runner: ModelRunner) -> list[int]:
            tokens = fixed_prefix_tokens(runner, messages, draft, tools)
            self._note_boundary(runner, messages, tools, tokens)
            return tokens

        tokens = await self._with_runner(render, _characters(messages) + len(draft or ""))
        return tuple(tokens)

    def _note_boundary(
        self,
        runner: ModelRunner,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        tokens: Sequence[int],
    ) -> None:
        """Remember where the system message ends (only worth it with a disk to save it to)."""
        if self.disk is not None:
            self.recurring.note(tokens, system_boundary(runner, messages, tools, tokens))

    async def _with_runner(self, render: Callable[[ModelRunner], T], characters: int) -> T:
        """Run a (Jinja + tokenizer) rendering in a worker thread; a refusal is a 400.

        A text that cannot fit the context whatever its tokens is refused before it is
        tokenized (which takes seconds for megabytes).
        """
        runner = await self.models.acquire(self.resident)
        self._learn_limits(runner)
        try:
            fewest = fewest_tokens(characters, runner)
            check_context_length(runner.context_length, fewest, 0, at_least=True)
            try:
                return await asyncio.to_thread(render, runner)
            except Exception as exc:  # the model's template or tokenizer refused it
                raise InvalidRequestError(
                    f"cannot render messages: {exc}", param="messages"
                ) from exc
        finally:
            self.models.release(self.resident)

    # -- generation --------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        if request.prompt.tokens is None:
            prompt = (
                await self.render_text(request.text_prompt)
                if request.text_prompt is not None
                else await self.render(request.messages, request.tools)
            )
            request = replace(request, prompt=prompt)
        runner = await self.models.acquire(self.resident, request.priority)
        try:
            job = self.scheduler.submit(
                JobSpec(
                    priority=request.priority,
                    work=lambda: self._work(runner, request),
                    kind=JobKind.SPECULATION if request.speculative else JobKind.CHAT,
                    # Generations of this runner may decode together (issue 33).
                    batch_key=f"{self.tier}/{id(runner)}",
                    batch_size=runner.max_sequences,
                )
            )
            self._jobs[request.id] = job
            try:
                async for event in job.events():
                    yield event
            finally:
                self._jobs.pop(request.id, None)
                if not job.finished:
                    job.cancel()
        finally:
            self.models.release(self.resident)

    def _work(self, runner: ModelRunner, request: GenerationRequest) -> GenerationSteps:
        """The job's steps, on the inference thread."""
        assert request.prompt.tokens is not None

        def keep(state: PromptState) -> None:
            self.prefix_store.insert(self.tier, state)

        return GenerationSteps(
            lambda: self._start(runner, request), len(request.prompt.tokens), keep
        )

    def _start(self, runner: ModelRunner, request: GenerationRequest) -> Generation:
        """Reuse the longest cached prefix, then start generating (on the inference thread)."""
        assert request.prompt.tokens is not None
        prompt = [*request.prompt.tokens, *request.resume]
        params = request.params
        if request.resume and params.max_tokens is not None:
            params = replace(params, max_tokens=max(params.max_tokens - len(request.resume), 1))
        if runner.default_stop:
            params = replace(params, stop=(*params.stop, *runner.default_stop))
        return runner.generate(
            prompt,
            params,
            self._cached_prefix(runner, prompt),
            continues_text=request.text_prompt is not None,
            resumed=len(request.resume),
        )

    def _cached_prefix(self, runner: ModelRunner, prompt: Sequence[int]) -> PromptState | None:
        """The longest cached prefix: from memory, or from disk when that covers more."""
        state = self.prefix_store.fetch(self.tier, prompt)
        if self.disk is None:
            return state
        hit = self.disk.best(
            runner.model_id, runner.fingerprint, prompt, len(state.tokens) if state else 0
        )
        cache = self.disk.load(hit) if hit is not None else None
        if hit is None or cache is None:
            return state
        log.info("tier %s: %d prompt tokens loaded from disk", self.tier, len(hit.tokens))
        # Used as it is (no copy): the job's final state, which extends it, goes to memory.
        return PromptState(cache, hit.tokens)

    def _save_to_disk(self, runner: ModelRunner, tokens: Sequence[int], cache: Any) -> int:
        """Save ``tokens``' cache, and its part up to each recurring boundary it goes beyond
        (saved last: the budget evicts the oldest first); how many files were new."""
        assert self.disk is not None
        saved = int(self.disk.save(runner.model_id, runner.fingerprint, tokens, cache))
        for prefix in self.recurring.within(tokens):
            saved += self.disk.save(runner.model_id, runner.fingerprint, prefix, cache)
        return saved

    async def persist(self) -> int:
        """Save this tier's in-memory prefix caches to disk (at shutdown); how many were new."""
        runner = self.resident.runner
        if self.disk is None or runner is None:
            return 0
        disk = self.disk

        def save_all() -> int:
            states = self.prefix_store.entries(self.tier)
            saved = sum(
                disk.save(runner.model_id, runner.fingerprint, state.tokens, state.cache)
                for state in states
            )
            # Then each recurring boundary, cut from an entry that holds it, newest last.
            for prefix in self.recurring.snapshot():
                source = next((s for s in states if s.tokens[: len(prefix)] == prefix), None)
                if source is not None:
                    saved += disk.save(runner.model_id, runner.fingerprint, prefix, source.cache)
            return saved

        saved = int(await self.scheduler.run_on_engine_thread(save_all))
        if saved:
            log.info("tier %s: %d prefix caches saved to disk", self.tier, saved)
        return saved

    async def abort(self, request_id: str) -> bool:
        job = self._jobs.get(request_id)
        if job is None:
            return False
        job.cancel()
        return True

    # -- embeddings --------------------------------------------------------------------------

    async def embed(
        self, inputs: Sequence[EmbeddingInput], priority: Priority = Priority.TASK
    ) -> Embeddings:
        """All inputs as one job in the slot (``gateway.seam.embedding``), computed one by
        one: a step per input, where a user job may pause it or a client cancel it."""
        runner = await self.models.acquire(self.resident, priority)
        try:
            self._learn_limits(runner)
            token_lists = await asyncio.to_thread(_embedding_tokens, runner, inputs)

            def work() -> Iterator[list[float]]:
                for tokens in token_lists:
                    yield runner.embed(tokens)

            job = self.scheduler.submit(JobSpec(priority=priority, work=work, kind=JobKind.EMBED))
            vectors: list[tuple[float, ...]] = []
            try:
                async for vector in job.events():
                    vectors.append(tuple(vector))
            finally:
                if not job.finished:
                    job.cancel()
            return Embeddings(tuple(vectors), sum(len(t) for t in token_lists))
        finally:
            self.models.release(self.resident)

    # -- typing hints ------------------------------------------------------------------------

    async def warm(
        self, hint_id: str, tokens: Sequence[int], session: str | None = None
    ) -> LocalWarmup:
        runner = await self.models.acquire(self.resident)
        spec = JobSpec(
            Priority.USER,
            work=lambda: self._prefill(runner, list(tokens)),
            kind=JobKind.PREFILL,
            id=f"prefill-{hint_id}",
        )
        try:
            # The hint lane: bounded, newest per session, paused by any user request.
            job = self.scheduler.submit_hint(spec, session)
        except BaseException:
            self.models.release(self.resident)
            raise
        return LocalWarmup(self, job)

    def _prefill(self, runner: ModelRunner, tokens: list[int]) -> Iterator[JobStep]:
        """The pre-prefill job's steps, on the inference thread."""
        state = self._cached_prefix(runner, tokens)
        cache = state.cache if state is not None else runner.new_cache()
        cached = len(state.tokens) if state is not None else 0
        yield Started(len(tokens), cached)
        try:
            for done in runner.prefill(tokens[cached:], cache):
                yield done if isinstance(done, PassPoint) else PrefillProgress(cached + done)
            if self.disk is not None:  # complete: worth keeping across a restart
                self._save_to_disk(runner, tokens, cache)  # never raises: a full disk is logged
        finally:
            # Also when cancelled half-way: what was computed is kept for the next hint.
            offset = runner.cache_length(cache)
            if offset > 0:
                self.prefix_store.insert(self.tier, PromptState(cache, tuple(tokens[:offset])))

    # -- state -------------------------------------------------------------------------------

    async def health(self) -> BackendHealth:
        resident = self.resident
        return BackendHealth(
            kind=self.info.kind,
            model=self.info.model_id,
            loaded=resident.runner is not None,
            state=resident.state,
            memory_bytes=resident.loaded_bytes,
            weights=_weights_health(resident),
            speculation=resident.speculation,
            batch=resident.runner.batch_limit if resident.runner is not None else None,
            decode_step=resident.runner.decode_step if resident.runner is not None else None,
        )

    async def close(self) -> None:
        for job in list(self._jobs.values()):
            job.cancel()


def _embedding_tokens(runner: ModelRunner, inputs: Sequence[EmbeddingInput]) -> list[list[int]]:
    """Each input's tokens (a text with the tokenizer's own special tokens, as a raw prompt;
    ids as they are), checked against the vocabulary and the context; a refusal names the
    input (``input[3]``)."""
    out = []
    for index, item in enumerate(inputs):
        param = f"input[{index}]"
        if isinstance(item, str):
            # A text that cannot fit whatever its tokens is refused untokenized.
            check_context_length(
                runner.context_length,
                fewest_tokens(len(item), runner),
                0,
                prompt_param=param,
                at_least=True,
            )
            # An empty text is refused as OpenAI does (its only tokens would be specials).
            tokens = runner.render_text(item) if item else []
        else:
            tokens = list(item)
            bad = next((t for t in tokens if not 0 <= t < runner.vocab_size), None)
            if bad is not None:
                raise InvalidRequestError(
                    f"input[{index}] has token id {bad}, outside the vocabulary "
                    f"(0-{runner.vocab_size - 1})",
                    param=param,
                )
        if not tokens:
            raise InvalidRequestError(f"input[{index}] is empty", param=param)
        check_context_length(runner.context_length, len(tokens), 0, prompt_param=param)
        out.append(tokens)
    return out


def fewest_tokens(characters: int, runner: ModelRunner) -> int:
    """The fewest tokens a text of this many characters can take (none holds more than
    ``max_token_chars``)."""
    return -(-characters // runner.max_token_chars)


def _weights_health(resident: Resident) -> Described | None:
    """The form of the weights; with streamed experts, their live hit ratio and reads too."""
    if resident.weights is None:
        return None
    described = resident.weights.as_dict()
    if resident.expert_stats is not None and "experts" in described:
        described["experts"].update(resident.expert_stats.as_dict())
    return described


def _characters(messages: Sequence[ChatMessage]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)

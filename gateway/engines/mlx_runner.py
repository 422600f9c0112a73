"""The MLX model runner: an mlx-lm model folder behind the token-level runner interface.

It loads the model, renders prompts, prefills in chunks the scheduler can pause between,
and runs the decode loop (``gateway.engines.mlx_decode``, a declared fork of mlx-lm's
``generate_step``); around the tokens it adds what a server needs: per-job samplers, stop
strings, usage counts and the cache state left behind for reuse. How long its passes take,
and so how they are cut, is ``gateway.engines.pass_timing``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.engines.batch_decode import BatchDecoder, batch_capacity
from gateway.engines.compiled_step import CompiledStep, batch_problem, reserve
from gateway.engines.constrained import GrammarConstraint, make_llg_tokenizer
from gateway.engines.device import ComputePath
from gateway.engines.draft_model import DraftCaches, DraftModel
from gateway.engines.drafting import Drafter, DraftPolicy
from gateway.engines.family import TAIL_TOKENS, ModelFamily, family_of
from gateway.engines.logprobs import TokenSpeller
from gateway.engines.mlx_decode import DecodeLoop, DecodeStep, pass_points
from gateway.engines.pass_timing import PassTiming
from gateway.engines.prefix_disk import weights_fingerprint
from gateway.engines.prefix_tokens import PrefixTokenizer
from gateway.engines.prompt_lookup import PromptLookup
from gateway.engines.reasoning_section import ReasoningSection
from gateway.engines.runner import KVCache, PromptState
from gateway.engines.same_tokenizer import tokenizer_mismatch
from gateway.engines.text_tail import TextTail
from gateway.engines.weights import WeightsMode, default_mode, load_model
from gateway.scheduler.pacing import PASS_POINT, JobStep, Pacing, PassPoint
from gateway.seam.backend import (
    Finished,
    FinishReason,
    PrefillProgress,
    SamplingParams,
    TokenChoice,
    TokenEvent,
)
from gateway.seam.reasoning import ReplyFormat, opened_in
from gateway.seam.request_parts import ChatMessage, Grammar, ToolSpec
from gateway.seam.tool_format import (
    generic_tool_messages,
    template_knows_tools,
    template_tools,
)

if TYPE_CHECKING:
    from gateway.engines.experts.plan import StreamedExperts

log = logging.getLogger(__name__)

# Long prompts are prefilled in chunks, each a point where the job can be cancelled or
# preempted. Throughput is flat above a few dozen tokens per chunk on both paths; the size
# bounds how long a user waits behind a background prefill (~1 s on a Linux CPU; on an
# H200, 2,048 tokens of an 8B model take ~75 ms, and smaller chunks waste its width).
PREFILL_CHUNK_TOKENS = {"metal": 512, "cuda": 2048, "cpu": 64}
QUANTIZED_CPU_CHUNK = 256
# The longest draft verified in one pass (``gateway.engines.drafting`` adapts it below this):
# a lookup's guess costs nothing to make, a draft model's a step of that model per token.
MAX_DRAFT_TOKENS = 16
MAX_MODEL_DRAFT_TOKENS = 8


class MLXGeneration:
    """One running generation: iterate it for events; ``state`` is set once it has ended.

    Its loop: the prompt's whole chunks (a point to pause or cancel after each), then the
    tokens (the last partial chunk goes with the first token's pass), then the finish with
    its usage; the cache it leaves behind is ``state``.
    """

    def __init__(
        self,
        runner: MLXRunner,
        prompt: Sequence[int],
        params: SamplingParams,
        state: PromptState | None,
        constraint: GrammarConstraint | None = None,
        *,
        continues_text: bool = False,
        resumed: int = 0,
    ) -> None:
        self.prompt = list(prompt)
        self.cached_tokens = len(state.tokens) if state else 0
        self.state: PromptState | None = None
        self.continues_text = continues_text
        self.resumed = resumed  # completion tokens at the prompt's end (a failed-over generation)
        self._runner = runner
        self._params = params
        self._given_cache = state.cache if state else None
        self._cache: KVCache | None = None
        self._generated: list[int] = []
        self._released_offset = 0  # > 0 while the cache is released: the tokens to recompute
        self._speller = runner.token_speller() if params.logprobs is not None else None
        self._mid_pass = False
        self._loop: DecodeLoop | None = None
        self._events: Generator[JobStep, None, None] = self._run(constraint)

    def __iter__(self) -> Iterator[JobStep]:
        return self

    def __next__(self) -> JobStep:
        event = next(self._events)
        self._mid_pass = event is PASS_POINT
        return event

    def close(self) -> None:
        self._events.close()

    def set_aside(self) -> None:
        """The job is paused: leave the batch of decoding sequences (it joins again when
        it resumes), so that the others decode on without it."""
        if self._loop is not None:
            self._loop.set_aside()

    def release_cache(self) -> bool:
        """Free the KV cache of a paused generation; it is recomputed when it resumes.

        The recomputation feeds the prompt and the tokens produced so far into the same
        cache objects, so mlx-lm's loop, the sampler's key and the stop matcher carry on
        exactly where they were. Returns False when the cache type cannot be released.
        """
        from mlx_lm.models.cache import KVCache

        cache = self._cache
        if self._mid_pass:
            return False  # paused inside a pass: the rest of it still reads the cache
        if not cache or self._released_offset or not all(type(c) is KVCache for c in cache):
            return False
        self._released_offset = cache[0].offset
        for layer in cache:
            layer.keys = layer.values = None
            layer.offset = 0
        return True

    def _run(self, constraint: GrammarConstraint | None) -> Generator[JobStep, None, None]:
        runner, params, prompt = self._runner, self._params, self.prompt
        given = self._given_cache
        cache = self._cache = given if given is not None else runner.new_cache()
        uncached = prompt[self.cached_tokens :]
        # Whole chunks are prefilled first, so that a long prompt can be paused or cancelled
        # between them; the last (partial) chunk goes with the first token's pass. The
        # head's chunks are sized one by one (``pacing``), the tail's size by the
        # chunk wanted now.
        chunk = runner.timing.chunk_tokens()
        head = len(uncached) - (len(uncached) % chunk or chunk) if len(uncached) > chunk else 0
        max_tokens = params.max_tokens or runner.context_length - len(prompt)
        self._loop = loop = runner.decode_loop(prompt, cache, params, constraint, self.resumed)
        steps = loop.tokens(uncached[head:], max_tokens)
        text = TextTail(
            runner.tokenizer.detokenizer, params.stop, continues_text=self.continues_text
        )
        # Tokens generated elsewhere: their text was sent already.
        text.replay(prompt[len(prompt) - self.resumed :])
        try:
            # The buffers sized once for the whole prompt and the first token (when the
            # cache holds some: an empty one is sized by its first chunk, and after it).
            runner.reserve(cache, len(prompt) + 1)
            yield from self._prefill(uncached[:head], then=len(uncached) - head + 1)
            yield from self._decode(steps, text, max_tokens)
        finally:
            steps.close()
            # The cache holds every token fed so far (also when stopped mid-prefill); mlx-lm
            # feeds each sampled token one step ahead, so after the prompt that is all or all
            # but the last generated token. A verified draft may have fed tokens past a stop
            # that ended the reply: those are trimmed.
            held = prompt + self._generated
            offset = runner.cache_length(cache)
            if offset > len(held):
                offset -= runner.trim_cache(cache, offset - len(held))
            self.state = PromptState(cache, tuple(held[:offset]))

    def _prefill(self, head: list[int], then: int) -> Iterator[JobStep]:
        assert self._cache is not None
        for done in self._runner.prefill(head, self._cache, then=then):
            if isinstance(done, PassPoint):
                yield done
                continue
            yield PrefillProgress(self.cached_tokens + done)
            self._restore_released_cache()

    def _decode(
        self, steps: Iterator[DecodeStep], text: TextTail, max_tokens: int
    ) -> Iterator[JobStep]:
        generated, end_tokens = self._generated, self._runner.eos_token_ids
        for step in steps:
            if isinstance(step, PassPoint):
                yield step
                continue
            token, logprobs = step
            generated.append(token)
            if token in end_tokens:
                break
            piece, stopped = text.add(token)
            if stopped:
                yield TokenEvent(piece, (token,), self._choices(token, logprobs))
                yield self._finished("stop", text)
                return
            if len(generated) == max_tokens:
                tail, stopped = text.end()
                yield TokenEvent(piece + tail, (token,), self._choices(token, logprobs))
                yield self._finished("stop" if stopped else "length", text)
                return
            # An event per token, even without text: each is a point where the scheduler
            # may cancel or preempt the job.
            yield TokenEvent(piece, (token,), self._choices(token, logprobs))
            self._restore_released_cache()
        tail, stopped = text.end()
        if tail:
            yield TokenEvent(tail)
        hit_end = bool(generated) and generated[-1] in end_tokens
        yield self._finished("stop" if stopped or hit_end else "length", text)

    def _finished(self, reason: FinishReason, text: TextTail) -> Finished:
        drafted = self._loop.drafted if self._loop is not None else None
        return Finished(
            reason,
            len(self.prompt) - self.resumed,
            len(self._generated) + self.resumed,
            self.cached_tokens,
            text.matched,
            drafted,
        )

    def _choices(self, token: int, logprobs: Any) -> tuple[TokenChoice, ...]:
        if self._speller is None:
            return ()
        return (self._speller.choice(token, logprobs, self._params.logprobs or 0),)

    def _restore_released_cache(self) -> None:
        """Recompute a released cache (``release_cache``) before the next pass uses it."""
        if self._released_offset:
            assert self._cache is not None
            # The loop's text: a verified draft's tokens are in the cache before they
            # are all yielded.
            text = self._loop.history if self._loop is not None else self.prompt
            fed = text[: self._released_offset]
            for _done in self._runner.prefill(fed, self._cache):
                pass
            self._released_offset = 0


class MLXRunner:
    """A loaded mlx-lm model.

    Create it on the thread that will use it, and use it only there (the scheduler's
    inference thread): mlx-lm generates on a thread-local stream, and a model loaded on one
    thread and run on another was seen to hang here.
    """

    def __init__(
        self,
        model_id: str,
        folder: Path,
        compute: ComputePath,
        default_stop: tuple[str, ...] = (),
        weights: WeightsMode | None = None,
        experts: StreamedExperts | None = None,
        pacing: Pacing | None = None,
        speculation: str = "lookup",
        draft_folder: Path | None = None,
        max_batch: int = 1,
        cache_budget_bytes: int | None = None,
        decode_step: str = "compiled",
    ) -> None:
        import mlx.core as mx

        self.model_id = model_id
        self.compute = compute
        self.folder = folder
        # The form of the weights (gateway.engines.weights); by default the compute path's.
        self.weights: WeightsMode = weights or default_mode(compute)
        # KV caches computed under one form are not those of another: saved prefixes say which.
        self.fingerprint = weights_fingerprint(folder, self.weights)
        self._llg_tokenizer: Any = None  # built on the first constrained request
        # With ``experts``, the MoE layers read their experts from disk (engines.experts).
        self.model, self.tokenizer, config = load_model(folder, self.weights, experts)
        wire_memory(compute)
        self.context_length = int(config.get("max_position_embeddings", 2048))
        self.vocab_size = int(config["vocab_size"])
        self.default_stop = default_stop
        self._read_tokenizer()
        self.prefill_chunk_tokens = prefill_chunk_tokens(compute, self.weights)
        # The pace of its passes, and who may arrive as the scheduler sees it: each prefill
        # chunk's budget (small while a user may be waiting) and whether a decode step may
        # be queued ahead. Without pacing: always the engine's own chunk, always one step
        # ahead (so is the warm-up below; ``pacing`` is given after it).
        self.timing = PassTiming(compute.device, self.prefill_chunk_tokens)
        # Drafting (``gateway.engines.drafting``): "lookup" by default, or "off"; a draft
        # model, where one is given, drafts instead of the lookup.
        self.speculation = speculation if draft_folder is None else "draft_model"
        self.experts = experts
        self._step_setting = decode_step  # "compiled" (where the model takes it) or "eager"
        self.draft_model = self._load_draft(draft_folder) if draft_folder else None
        self._speller: TokenSpeller | None = None  # built on the first request for logprobs
        # Sequences decoding together (``gateway.engines.batch_decode``), as many as the
        # setting and the memory left for their KV caches allow. Before the warm-up: on a
        # GPU it generates, and every generation's decode loop holds the batch.
        limit = batch_capacity(self, max_batch, cache_budget_bytes)
        self.batch = BatchDecoder(
            self.model, limit, self.timing, queue_ahead=compute.device != "cpu"
        )
        self.max_sequences = self.batch.capacity
        self.batch_limit = self.batch.limit.as_dict()
        self._compile_steps()  # where the model takes it (``decode_step``)
        self._warm_up()
        self.timing.pacing = pacing
        mx.reset_peak_memory()  # report the serving peak, not the load-time conversion
        log.info("model %s ready on %s", model_id, compute.as_dict())

    def _read_tokenizer(self) -> None:
        """What the runner keeps of its tokenizer: its end tokens, its longest token, whether
        its template knows tools, and a tokenizer of rendered chats that reuses a recent
        text's ids (``gateway.engines.prefix_tokens``)."""
        self.eos_token_ids = frozenset(self.tokenizer.eos_token_ids)
        # (Byte-level vocabularies spell a byte as one character: an upper bound on the text.)
        self.max_token_chars = max(len(t) for t in self.tokenizer.get_vocab())
        self.template_knows_tools = template_knows_tools(
            getattr(self.tokenizer, "chat_template", None)
        )
        self.prefix_tokenizer = prefix_tokenizer_of(self.tokenizer)

    def _load_draft(self, folder: Path) -> Any:
        """A draft model, in the form of this model's weights (the tokenizers were compared
        at start already, by the wiring: this is the check of last resort)."""
        mismatch = tokenizer_mismatch(self.folder, folder)
        if mismatch:
            raise ValueError(
                f"draft model {folder} does not share the tokenizer of {self.model_id}: {mismatch}"
            )
        model, _, _ = load_model(folder, self.weights)
        return model

    @property
    def decode_step(self) -> dict[str, Any]:
        """For ``/health``: whether a decode step's pass is compiled (a draft model's too),
        and why not."""
        described: dict[str, Any] = {
            "compiled": self.compiled_step is not None,
            "reason": self._step_reason,
        }
        if self.batch.capacity > 1:
            described["batch_compiled"] = self.batch.compiled is not None
            if self._batch_step_problem and self.compiled_step is not None:
                described["batch_reason"] = self._batch_step_problem
        if self.draft_model is not None:
            described["draft_compiled"] = self.draft_step is not None
        return described

    def _compile_steps(self) -> None:
        """A decode step's pass compiled, where the model takes it; the batch's too, where
        its batched steps take it (``gateway.engines.compiled_step``)."""
        import mlx.core as mx
        from mlx_lm.generate import generation_stream

        self.compiled_step, self._step_reason = self._compiled_step(self.model)
        self._batch_step_problem: str | None = None
        if self.compiled_step is None or self.batch.capacity < 2:
            return
        with mx.stream(generation_stream):
            self._batch_step_problem = batch_problem(self.compiled_step, self.model)
        self.batch.compiled = self.compiled_step if self._batch_step_problem is None else None

    def _compiled_step(self, model: Any) -> tuple[CompiledStep | None, str]:
        """``model``'s decode step compiled, where the setting and the model allow (else
        None), and why (``gateway.engines.compiled_step``)."""
        import mlx.core as mx
        from mlx_lm.generate import generation_stream

        if self._step_setting == "eager":
            return None, "eager: the tier's decode_step setting"
        if model is self.model and self.experts is not None:
            return None, "eager: its experts stream from disk (the routing is read at each step)"
        with mx.stream(generation_stream):
            return CompiledStep.probe(model, int(next(iter(self.eos_token_ids), 0)))

    def _warm_up(self) -> None:
        """Compile at load what serving uses: MLX prepares its kernels on first use (Metal
        and CUDA compile them, per kernel and shape), which would otherwise land on the
        first requests after a start.

        On a CPU one tiny pass is enough (nothing is compiled; load time matters more). On
        a GPU, a short generation runs the shapes of serving: a whole prefill chunk, a
        partial one on a non-empty cache with the first token's sampling, the pipelined
        decode steps (greedy, then sampled with top-p), each with log-probabilities.
        """
        import mlx.core as mx

        first = int(next(iter(self.eos_token_ids), 0))
        if self.compute.device == "cpu":
            mx.eval(self.model(mx.array([[first, first]]), cache=self.new_cache()))
            return
        # Token ids below the vocabulary's end, none of them an end token.
        filler = [t for t in range(100, 200) if t not in self.eos_token_ids]
        length = min(self.prefill_chunk_tokens + 3, self.context_length - 8)
        prompt = (filler * (length // len(filler) + 1))[:length]
        for params in (
            SamplingParams(max_tokens=4, temperature=0.0, logprobs=2),
            SamplingParams(max_tokens=3, temperature=0.7, top_p=0.9, seed=0),
        ):
            for _event in self.generate(prompt, params):
                pass
        mx.synchronize()

    def close(self) -> None:
        import mlx.core as mx

        # Drop every reference to the weights, then give MLX's cached buffers back.
        del self.model
        mx.clear_cache()

    # -- prompts -----------------------------------------------------------------------------

    def render_chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        thinking: bool | None = None,
    ) -> list[int]:
        extra: dict[str, Any] = {}
        if thinking is not None:  # mlx-lm maps it onto the template's own keyword
            extra["enable_thinking"] = thinking
        uses_tools = bool(tools) or any(
            m.get("role") == "tool" or m.get("tool_calls") for m in messages
        )
        if uses_tools and self.template_knows_tools:
            extra["tools"] = template_tools(tools) if tools else None
            messages = self.family.template_messages(messages)
        elif uses_tools:
            messages = generic_tool_messages(messages, tools)
        rendered = self.tokenizer.apply_chat_template(
            list(messages),
            add_generation_prompt=add_generation_prompt and not continue_final_message,
            continue_final_message=continue_final_message,
            tokenize=self.prefix_tokenizer is None,
            **extra,
        )
        if self.prefix_tokenizer is not None:
            # The text's start was tokenized for an earlier turn: only the rest is now.
            return self.prefix_tokenizer.encode(str(rendered))
        if isinstance(rendered, Mapping):  # some transformers versions return a BatchEncoding
            rendered = rendered["input_ids"]
        return [int(t) for t in rendered]

    @cached_property
    def family(self) -> ModelFamily:
        """The template's reasoning markers, thinking switch and tool-call format."""
        return family_of(self.tokenizer)

    def reply_format(self, prompt: Sequence[int], thinking: bool | None = None) -> ReplyFormat:
        tail = str(self.tokenizer.decode(list(prompt[-TAIL_TOKENS:]))) if prompt else ""
        return self.family.reply_format(tail, thinking)

    def render_text(self, text: str) -> list[int]:
        # With the tokenizer's own special tokens (Gemma's <bos>), as a raw prompt needs.
        return [int(t) for t in self.tokenizer.encode(text)]

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]

    # -- caches ------------------------------------------------------------------------------

    def new_cache(self) -> KVCache:
        from mlx_lm.models.cache import make_prompt_cache

        return make_prompt_cache(self.model)

    def reserve(self, cache: KVCache, tokens: int) -> None:
        """Size ``cache``'s buffers for ``tokens`` before they are written (``reserve``):
        one copy instead of mlx-lm's copy per chunk."""
        reserve(cache, tokens, buckets=self.compiled_step is not None)

    def cache_length(self, cache: KVCache) -> int:
        return int(cache[0].offset) if cache else 0

    def trim_cache(self, cache: KVCache, tokens: int) -> int:
        """Drop the last ``tokens`` from ``cache``; returns how many it could drop."""
        from mlx_lm.models.cache import trim_prompt_cache

        trimmed: Any = trim_prompt_cache(cache, tokens)  # typed as a list; it is a count
        return int(trimmed)

    def prefill(
        self, tokens: Sequence[int], cache: KVCache, *, then: int = 1
    ) -> Iterator[int | PassPoint]:
        """``then``: the tokens written right after these (a prompt's tail, the first
        sampled token), for which the buffers are sized too."""
        import mlx.core as mx

        timing, done = self.timing, 0
        while done < len(tokens):
            self.reserve(cache, self.cache_length(cache) + len(tokens) - done + then)
            chunk = list(tokens[done : done + timing.chunk_tokens()])
            started = time.perf_counter()
            self.model(mx.array(chunk)[None], cache=cache)
            states = [c.state for c in cache]
            # The time spent paused inside the chunk is not its pace.
            paused = yield from pass_points(cache, timing.pass_stages(chunk))
            mx.eval(states)
            seconds = time.perf_counter() - started - paused
            timing.note_chunk(seconds, len(chunk))
            done += len(chunk)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "prefill chunk: %d tokens in %.1f ms (at %d)", len(chunk), seconds * 1e3, done
                )
            yield done

    # -- embeddings --------------------------------------------------------------------------

    def embed(self, tokens: Sequence[int]) -> list[float]:
        """Mean-pooled, L2-normalized last hidden state: mlx-lm's ``model.model`` is the
        decoder stack with its final norm, before the output head. One input per pass, with
        no cache and no padding, so the vector is the same whatever batch it came in."""
        import mlx.core as mx

        decoder = getattr(self.model, "model", None)
        if decoder is None:
            raise TypeError(f"{self.model_id}: no decoder stack (model.model) to embed with")
        hidden = decoder(mx.array(list(tokens))[None])[0].astype(mx.float32)
        pooled = mx.mean(hidden, axis=0)
        vector = pooled / mx.maximum(mx.linalg.norm(pooled), 1e-12)
        mx.eval(vector)
        values: list[float] = vector.tolist()  # type: ignore[assignment]
        return values

    # -- generation --------------------------------------------------------------------------

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        state: PromptState | None = None,
        *,
        continues_text: bool = False,
        resumed: int = 0,
    ) -> MLXGeneration:
        # The grammar is compiled now, so that a bad one fails before the job reports a start.
        constraint = self._constraint(params.grammar) if params.grammar else None
        return MLXGeneration(
            self, prompt, params, state, constraint, continues_text=continues_text, resumed=resumed
        )

    def token_speller(self) -> TokenSpeller:
        if self._speller is None:
            self._speller = TokenSpeller(self.tokenizer)
        return self._speller

    def _constraint(self, grammar: Grammar) -> GrammarConstraint:
        if self._llg_tokenizer is None:
            self._llg_tokenizer = make_llg_tokenizer(
                self.folder / "tokenizer.json", self.vocab_size, sorted(self.eos_token_ids)
            )
        return GrammarConstraint(
            self._llg_tokenizer, grammar, use_metal=self.compute.device == "metal"
        )

    def reasoning_section(
        self, prompt: Sequence[int], params: SamplingParams, resumed: int
    ) -> ReasoningSection | None:
        """The processor that opens the reasoning section and ends it on budget, when the
        request needs either and the model thinks."""
        family = self.family
        open_first = params.open_reasoning and not resumed
        if (params.reasoning_budget is None and not open_first) or not family.think_start:
            return None
        start, end = family.think_start_ids, family.think_end_ids
        if len(start) != 1 or len(end) != 1:
            log.info("reasoning markers of several tokens are not forced: %s", family.think_start)
            return None
        opened = opened_in(prompt, start, end)
        # Tokens of a section generated elsewhere (a resumed generation) count as spent.
        spent = None if opened is None else len(prompt) - max(opened, len(prompt) - resumed)
        return ReasoningSection(start[0], end[0], params.reasoning_budget, spent, open_first)

    @property
    def draft_model(self) -> Any:
        """The loaded draft model (None: drafting, if on, is a lookup in the text)."""
        return self._draft_model

    @draft_model.setter
    def draft_model(self, model: Any) -> None:
        # Its caches of recent generations (``draft_model.DraftCaches``) go with it: a
        # draft model set anew (a benchmark swaps them) starts with none.
        self._draft_model = model
        self.draft_caches = DraftCaches()
        self.draft_step = self._compiled_step(model)[0] if model is not None else None

    def decode_loop(
        self,
        prompt: Sequence[int],
        cache: KVCache,
        params: SamplingParams,
        constraint: GrammarConstraint | None = None,
        resumed: int = 0,
    ) -> DecodeLoop:
        """The decode loop of a generation over ``prompt``: its sampler, its processors
        (penalties and bias, then a reasoning budget, then the grammar's mask, last: whatever
        biases did, only allowed tokens remain) and, where drafting is on, its drafter."""
        from gateway.engines.sampling import make_job_logits_processors, make_job_sampler

        sampler = make_job_sampler(params, draws_done=resumed)
        if constraint is not None:
            sampler = constraint.watch(sampler)
        section = self.reasoning_section(prompt, params, resumed)
        last: list[Callable[[Any, Any], Any]] = [constraint] if constraint is not None else []
        if section is not None:  # before the mask, which allows the markers it forces
            last.insert(0, section)
        return DecodeLoop(
            self.model,
            cache,
            self.timing,
            sampler,
            partial(make_job_logits_processors, params, carried=prompt[len(prompt) - resumed :]),
            last,
            list(prompt),
            self._drafting(prompt, params),
            self.batch,
            self.compiled_step,
        )

    def _drafting(
        self, prompt: Sequence[int], params: SamplingParams
    ) -> tuple[Drafter, DraftPolicy] | None:
        """The drafter of a generation, where speculation is on for this runner."""
        if self.speculation == "off":
            return None
        if self.draft_model is not None:
            drafter = DraftModel(self.draft_model, self.draft_caches, self.draft_step)
            return drafter, DraftPolicy(MAX_MODEL_DRAFT_TOKENS)
        return PromptLookup(), DraftPolicy(MAX_DRAFT_TOKENS)


def wire_memory(compute: ComputePath) -> None:
    """On a Mac, ask macOS to keep the weights wired (mlx-lm's recommended limit)."""
    if compute.device == "metal":
        from mlx_lm.utils import maybe_set_recommended_wired_limit

        maybe_set_recommended_wired_limit()


def prefix_tokenizer_of(tokenizer: Any) -> PrefixTokenizer | None:
    """A rendered chat's tokenizer that reuses a recent text's ids (``prefix_tokens``): for
    a fast (Rust) Hugging Face tokenizer, as chat templates tokenize (no special tokens
    added); None otherwise (the template tokenizes)."""
    backend = getattr(getattr(tokenizer, "_tokenizer", None), "backend_tokenizer", None)
    return PrefixTokenizer(backend) if backend is not None else None


def prefill_chunk_tokens(compute: ComputePath, weights: WeightsMode) -> int:
    """The engine's own prefill chunk on ``compute`` for weights held as ``weights``."""
    tokens = PREFILL_CHUNK_TOKENS.get(compute.device, 512)
    if weights == "quantized":
        # Each chunk dequantizes every layer once (gateway.engines.weights): longer chunks
        # spread that cost over more tokens.
        return max(tokens, QUANTIZED_CPU_CHUNK)
    return tokens


def mlx_memory() -> dict[str, int]:
    """Bytes of MLX memory in use (``active``) and the highest since the last reset."""
    import mlx.core as mx

    return {"active": int(mx.get_active_memory()), "peak": int(mx.get_peak_memory())}

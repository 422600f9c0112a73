"""Chats, whatever their wire format: from a prepared request to a tier's backend, and back.

One service underneath every wire format (OpenAI chat completions and legacy completions,
Anthropic messages, task types): it renders the conversation (with any tools), checks it
against the context and the gateway's caps, runs it on the tier's backend through the
request-level seam, and turns the backend's tokens into reply pieces (text, tool calls) with
their log-probabilities. The formats on top are ``openai_chat``, ``completions`` and
``anthropic``. Nothing here knows HTTP or MLX.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from gateway.engines.context_length import check_context_length
from gateway.errors import InvalidRequestError, ShuttingDownError
from gateway.metrics import GenerationMetrics
from gateway.protocol.openai import completion_id, now
from gateway.seam.backend import (
    BackendEvent,
    Drafted,
    Finished,
    FinishReason,
    GenerationRequest,
    PrefillProgress,
    Priority,
    Prompt,
    SamplingParams,
    Started,
    TextPrompt,
    TicketSpec,
    TokenChoice,
    TokenEvent,
)
from gateway.seam.grammar import GrammarError, grammar_text
from gateway.seam.reasoning import ReplyFormat, reply_grammar
from gateway.seam.request_parts import ChatMessage, Grammar, ToolSpec
from gateway.seam.tool_format import ToolChoice, call_wrapper_chars
from gateway.serving.reasoning import ReasoningPiece, ReasoningSplitter
from gateway.serving.speculation import Speculation, speculated_events
from gateway.serving.tiers import Tier, TierRegistry
from gateway.serving.tool_calls import (
    CallArguments,
    ReplyPiece,
    TextPiece,
    ToolCall,
    ToolParser,
    make_tool_parser,
)
from gateway.serving.usage import TokenUsage

DEFAULT_TEMPERATURE = 1.0  # OpenAI's default
# After the grace period, how long stopped chats get to send their last events.
DRAIN_STOP_SECONDS = 3.0


@dataclass(frozen=True)
class FieldNames:
    """How a wire format names the request fields a refusal points at (``param``)."""

    max_tokens: str = "max_tokens"  # named in a context-length or cap error
    grammar: str = "response_format"  # named when the grammar is refused


CHAT_FIELDS = FieldNames()  # chat completions' names, the default

# Why a reply ended: the backend's reasons, or a reply of tool calls (each wire format names
# these in its own words at its edge: ``function_call``, ``tool_use``, ``max_tokens``...).
ChatFinishReason = FinishReason | Literal["tool_calls"]


def plain_finish(reason: ChatFinishReason) -> FinishReason:
    """The finish of a reply that was offered no tools (legacy completions, tasks), whose
    reason is never ``tool_calls``."""
    return "length" if reason == "length" else "stop"


# A chat's ticket for a peer made from its final sampling (the max_tokens the context left).
TicketFor = Callable[[SamplingParams], TicketSpec | None]


@dataclass(frozen=True)
class ToolUse:
    """Functions offered to the model and how it may call them."""

    tools: tuple[ToolSpec, ...]
    choice: ToolChoice
    param: str = "tools"  # named when they are refused
    id_prefix: str = "call_"  # of the calls' ids (Anthropic's are "toolu_...")


def calling(tool_use: ToolUse | None) -> ToolUse | None:
    """The tool use if the model may call (not ``tool_choice: none``)."""
    return tool_use if tool_use is not None and tool_use.choice.mode != "none" else None


@dataclass(frozen=True)
class ReplyStep:
    """What one token added to the reply: pieces of reasoning, text or calls, and its
    log-probabilities."""

    pieces: list[ReplyPiece | ReasoningPiece]
    logprobs: tuple[TokenChoice, ...] = ()

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces if isinstance(p, TextPiece))

    @property
    def reasoning(self) -> str:
        return "".join(p.text for p in self.pieces if isinstance(p, ReasoningPiece))


class CarriedLogprobs:
    """A stream's log-probabilities, each sent with text: a token without text of its own
    (part of a character split over tokens) rides with the next step that has text."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.pending: list[TokenChoice] = []  # what the stream's last event carries

    def take(self, step: ReplyStep) -> tuple[str, list[TokenChoice]]:
        """The step's text and, when it has some, the log-probabilities it carries."""
        if self.wanted:
            self.pending.extend(step.logprobs)
        text = step.text
        if not text:
            return "", []
        carried, self.pending = self.pending, []
        return text, carried


@dataclass
class ChatResult:
    """A whole reply: its text, its calls, and why it ended (and its reasoning, if any)."""

    text: str
    calls: list[ToolCall]
    logprobs: list[TokenChoice]
    finish_reason: ChatFinishReason
    stop_sequence: str | None
    reasoning: str = ""


@dataclass(frozen=True)
class ChatRequest:
    """A chat as a wire format (or a task) asks for it, before it is rendered: what
    ``ChatService.prepare`` checks and renders into a ``PreparedChat``."""

    tier: Tier
    messages: tuple[ChatMessage, ...]  # empty for a raw ``text_prompt``
    # As asked, before the prompt's length is known (max_tokens None: the rest of the context).
    sampling: SamplingParams
    priority: Priority
    model_name: str  # as the client named it, echoed in responses
    chat_id: str | None = None  # the replies' id in the wire format's form (None: chatcmpl-...)
    session: str | None = None
    include_usage: bool = False
    arrived: float = field(default_factory=time.perf_counter)
    tool_use: ToolUse | None = None
    text_prompt: TextPrompt | None = None  # a legacy completion's raw prompt
    thinking: bool | None = None  # the template's thinking switch (None: its default)
    fields: FieldNames = CHAT_FIELDS
    # A max_tokens above the gateway's cap is shortened (a task's own) rather than refused
    # (a client's).
    clamp_to_cap: bool = False
    # What the chat is as a ticket for a peer, or how to make one from the final sampling;
    # None: it runs on this node only.
    ticket: TicketSpec | TicketFor | None = None


@dataclass(frozen=True)
class PreparedChat:
    """A validated chat, rendered (where the backend renders locally), ready to run; built
    whole by ``ChatService.prepare``."""

    tier: Tier
    messages: tuple[ChatMessage, ...]
    prompt: Prompt
    params: SamplingParams
    priority: Priority
    arrived: float
    model_name: str  # as the client named it, echoed in responses
    session: str | None = None
    include_usage: bool = False
    tool_use: ToolUse | None = None
    text_prompt: TextPrompt | None = None  # a legacy completion's raw prompt
    # What the request is as a ticket for a peer (None: it runs on this node only).
    ticket: TicketSpec | None = None
    id: str = field(default_factory=completion_id)
    created: int = field(default_factory=now)
    # The client's max_tokens where the backend was given more: the room a tool call's
    # wrapper takes (its tags and name) is not the client's to pay (see ``reply_budget``).
    reply_budget: int | None = None

    def generation_request(self) -> GenerationRequest:
        return GenerationRequest(
            id=self.id,
            messages=self.messages,
            params=self.params,
            priority=self.priority,
            session=self.session,
            prompt=self.prompt,
            tools=self.tool_use.tools if self.tool_use else (),
            text_prompt=self.text_prompt,
            ticket=self.ticket,
        )


@dataclass
class ChatRun:
    """A chat in flight: the backend's events, and what has been counted of them."""

    chat: PreparedChat
    backend_events: AsyncGenerator[BackendEvent, None]  # read once
    started: Started
    parser: ToolParser | None = None  # set when the model may call tools
    splitter: ReasoningSplitter | None = None  # set when the model's reply may reason
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of the completion tokens, those of the reasoning section
    finished: Finished | None = None
    # Set when the server's shutdown grace ran out while this chat was still generating.
    interrupted: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def prompt_tokens(self) -> int:
        if self.finished is not None and self.finished.prompt_tokens:
            return self.finished.prompt_tokens
        return self.started.prompt_tokens or 0

    @property
    def cached_tokens(self) -> int:
        if self.finished is not None:
            return self.finished.cached_tokens
        return self.started.cached_tokens

    @property
    def finish_reason(self) -> ChatFinishReason:
        # A reply of calls whose arguments all closed is a call, even where max_tokens then
        # cut its closing tag: the client has every argument it asked for.
        calls = self.parser.calls if self.parser is not None else []
        called = bool(calls) and all(call.complete for call in calls)
        if called and (self.finished is None or self.finished.reason in ("stop", "length")):
            return "tool_calls"
        return self.finished.reason if self.finished is not None else "stop"

    @property
    def stop_sequence(self) -> str | None:
        return self.finished.stop_sequence if self.finished is not None else None

    @property
    def drafted(self) -> Drafted | None:
        return self.finished.drafted if self.finished is not None else None

    def usage(self) -> TokenUsage:
        """The tokens counted so far (all of them once the chat has ended)."""
        drafted = self.drafted
        return TokenUsage(
            prompt=self.prompt_tokens,
            completion=self.completion_tokens,
            cached=self.cached_tokens,
            reasoning=self.reasoning_tokens if self.splitter is not None else None,
            drafted=drafted.drafted if drafted is not None else None,
            accepted=drafted.accepted if drafted is not None else None,
        )


@dataclass(frozen=True)
class StreamHead:
    """What a stream's opening event says before its chat is prepared: the reply's id, its
    time, and the model as the client named it (see ``gateway.routes.opening``)."""

    id: str
    model: str
    created: int = field(default_factory=now)


async def _check_grammar_of(
    constrained: SamplingParams, tool_use: ToolUse | None, fields: FieldNames
) -> None:
    """Compile the request's grammar, if it has one, to refuse a bad one now: off the event
    loop (a grammar of many tools takes ~10 ms)."""
    if constrained.grammar is not None:
        calls = calling(tool_use)
        param = calls.param if calls else fields.grammar
        await asyncio.to_thread(_check_grammar, constrained.grammar, param)


def _check_grammar(grammar: Grammar, param: str) -> None:
    """Refuse a grammar llguidance cannot compile, naming the request's field."""
    try:
        grammar_text(grammar)
    except GrammarError as exc:
        raise InvalidRequestError(f"unsupported schema or grammar: {exc}", param=param) from exc


class _ReplyBudget:
    """The client's max_tokens counted over a reply that may call tools: text, reasoning and
    arguments count; the tokens that only write a call's wrapper do not."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        # Tokens of text the parser holds while it may open a call: they count with the
        # text they become, and not at all if they become a call's wrapper.
        self.held = 0

    def spent(
        self, pieces: Sequence[ReplyPiece | ReasoningPiece], tokens: int, wrote: bool
    ) -> bool:
        """Count one step's tokens (``wrote``: they made text, else they are a character's
        first bytes, as an emoji's first two of three tokens: never a wrapper's, which is
        ASCII); True once the budget is used up."""
        if self.limit is None:
            return False
        if not wrote:
            self.used += tokens
            return self.used >= self.limit
        self.held += tokens
        if any(isinstance(p, TextPiece | ReasoningPiece | CallArguments) for p in pieces):
            self.used += self.held
            self.held = 0
        elif pieces:  # a call's wrapper only
            self.held = 0
        return self.used >= self.limit


class PromptHints(Protocol):
    """What the chat service asks of the typing hints before it queues a chat: implemented
    by ``gateway.serving.hints.HintService``, which itself runs tasks through this service."""

    async def take_speculation(
        self, tier: str, prompt: Sequence[int], params: SamplingParams, session: str | None
    ) -> Speculation | None:
        """The speculated start of the answer to exactly this request, if there is one."""
        ...

    async def join(self, tier: str, prompt: Sequence[int], session: str | None) -> None:
        """Settle the hints a chat request to ``tier`` may use, before it is queued."""
        ...


class ChatService:
    """Turns chat requests into backend requests and their events into OpenAI responses."""

    def __init__(
        self,
        registry: TierRegistry,
        metrics: GenerationMetrics,
        typing: PromptHints,
        max_completion_tokens: int | None = None,
    ) -> None:
        self.registry = registry
        self.max_completion_tokens = max_completion_tokens
        self.metrics = metrics
        self.typing = typing
        self.closing = False  # shutting down: no new chats
        self.active: dict[str, ChatRun] = {}

    async def prepare(self, request: ChatRequest) -> PreparedChat:
        """Render the request's messages (or its raw text prompt) for its tier and check
        them; the common path of every wire format and of tasks."""
        tier, sampling, fields = request.tier, request.sampling, request.fields
        tool_use = request.tool_use
        self._check_capabilities(tier, sampling, tool_use, request.text_prompt, fields)
        if request.text_prompt is not None:
            prompt = await tier.backend.render_text(request.text_prompt)
        else:
            tools = tool_use.tools if tool_use is not None else ()
            prompt = await tier.backend.render(request.messages, tools, request.thinking)
        constrained = self._constrained(prompt, sampling, tool_use, fields)
        await _check_grammar_of(constrained, tool_use, fields)
        params = self._sampling_params(constrained, tier, prompt, fields, request.clamp_to_cap)
        params, budget = self._with_call_room(params, tier, prompt, tool_use, sampling.max_tokens)
        ticket = request.ticket
        return PreparedChat(
            tier,
            request.messages,
            prompt,
            params,
            request.priority,
            request.arrived,
            request.model_name,
            request.session,
            request.include_usage,
            tool_use=tool_use,
            text_prompt=request.text_prompt,
            ticket=ticket(params) if callable(ticket) else ticket,
            id=request.chat_id or completion_id(),
            reply_budget=budget,
        )

    @staticmethod
    def _with_call_room(
        params: SamplingParams,
        tier: Tier,
        prompt: Prompt,
        tool_use: ToolUse | None,
        requested: int | None,
    ) -> tuple[SamplingParams, int | None]:
        """Where the reply may call and the client set max_tokens: the backend's max_tokens
        with room for the calls' wrappers (a token is at most one character of one), within
        the context, and the client's budget, which ``replies`` counts without the wrappers."""
        calls = calling(tool_use)
        budget = params.max_tokens
        if calls is None or requested is None or budget is None:
            return params, None
        limit = budget + call_wrapper_chars(calls.tools, calls.choice)
        context = tier.backend.limits().context_length
        if prompt.tokens is not None and context is not None:
            limit = min(limit, context - len(prompt.tokens))
        return replace(params, max_tokens=max(limit, budget)), budget

    @classmethod
    def _check_capabilities(
        cls,
        tier: Tier,
        sampling: SamplingParams,
        tool_use: ToolUse | None,
        text_prompt: TextPrompt | None,
        fields: FieldNames,
    ) -> None:
        """Refuse what the tier's backend cannot do: constrain its output (tool calls and
        answer formats), report log-probabilities, take a raw text prompt."""
        capabilities = tier.backend.info.capabilities
        calls = calling(tool_use)
        if calls is not None or sampling.grammar is not None:
            cls._check_constrainable(tier, calls.param if calls else None, fields.grammar)
        if sampling.logprobs is not None and not capabilities.logprobs:
            raise InvalidRequestError(
                f"tier {tier.name!r} ({tier.backend.info.kind} backend) cannot report "
                "log-probabilities; use a local tier",
                param="logprobs",
            )
        if text_prompt is not None and not capabilities.text_prompts:
            raise InvalidRequestError(
                f"tier {tier.name!r} takes no raw text prompts", param="prompt"
            )

    @staticmethod
    def _check_constrainable(tier: Tier, tools_param: str | None, grammar_param: str) -> None:
        """Tool calls (``tools_param`` names them) and answer formats need a backend that
        constrains its output."""
        if tier.backend.info.capabilities.structured_output:
            return
        if tools_param is not None:
            raise InvalidRequestError(
                f"tier {tier.name!r} ({tier.backend.info.kind} backend) cannot constrain its output, "
                "which tool calls need; use a local tier",
                param=tools_param,
            )
        raise InvalidRequestError(
            f"tier {tier.name!r} ({tier.backend.info.kind} backend) cannot constrain its output; "
            "use a local tier for structured output",
            param=grammar_param,
        )

    @staticmethod
    def _constrained(
        prompt: Prompt, sampling: SamplingParams, tool_use: ToolUse | None, fields: FieldNames
    ) -> SamplingParams:
        """``sampling`` with the grammar of the whole reply and whether the reply opens its
        reasoning section.

        The grammar follows the reply's layout: calls or the answer format come after the
        reasoning section, which the rendered prompt may already have opened.
        """
        reply = prompt.reply or ReplyFormat()
        answer = grammar = sampling.grammar
        calls = calling(tool_use)
        if calls is not None:
            grammar = reply_grammar(reply, answer, calls.tools, calls.choice)
        elif answer is not None:
            grammar = reply_grammar(reply, answer)
        # The reply opens its section where thinking is on, unless a grammar of its own (a
        # task's) says how it begins.
        opens = reply.thinking == "required" and (grammar is None or grammar is not answer)
        return replace(sampling, grammar=grammar, open_reasoning=opens)

    def _sampling_params(
        self,
        sampling: SamplingParams,
        tier: Tier,
        prompt: Prompt,
        fields: FieldNames,
        clamp_to_cap: bool,
    ) -> SamplingParams:
        """The sampling the backend runs: ``max_tokens`` checked against the gateway's cap
        and the context (and, where not asked, what the context leaves)."""
        limits = tier.backend.limits()
        context = limits.context_length
        requested = sampling.max_tokens
        cap = self.max_completion_tokens
        if cap is not None and requested is not None and requested > cap:
            if not clamp_to_cap:
                raise InvalidRequestError(
                    f"{fields.max_tokens} is {requested}; this gateway allows at most "
                    f"{cap} completion tokens",
                    param=fields.max_tokens,
                )
            requested = cap
        max_tokens = requested
        if prompt.tokens is not None and context is not None:
            prompt_tokens = len(prompt.tokens)
            check_context_length(
                context, prompt_tokens, requested or 1, completion_param=fields.max_tokens
            )
            max_tokens = requested or min(context - prompt_tokens, cap or context)
        vocab = limits.vocab_size
        if vocab is not None and any(t >= vocab for t in sampling.logit_bias):
            raise InvalidRequestError(
                f"logit_bias names a token id beyond the vocabulary ({vocab})", param="logit_bias"
            )
        temperature = sampling.temperature
        if sampling.top_p == 0.0:  # nothing survives nucleus filtering but the top token
            temperature = 0.0
        return replace(
            sampling,
            max_tokens=max_tokens,
            temperature=temperature,
            repetition_penalty=tier.repetition_penalty_for(sampling.repetition_penalty),
        )

    # -- running -------------------------------------------------------------------------------

    async def start(self, chat: PreparedChat) -> ChatRun:
        """Hand the chat to its backend and wait until it computes (raises 429/502/503...)."""
        backend = chat.tier.backend
        speculation = None
        if chat.prompt.tokens is not None and backend.info.capabilities.typing_hints:
            speculation = await self.typing.take_speculation(
                chat.tier.name, chat.prompt.tokens, chat.params, chat.session
            )
            await self.typing.join(chat.tier.name, chat.prompt.tokens, chat.session)
        if self.closing:
            raise ShuttingDownError()
        request = chat.generation_request()
        if speculation is not None:
            # What was speculated here continues here: not a ticket for a peer.
            events = speculated_events(speculation, replace(request, ticket=None), backend)
        else:
            events = backend.generate(request)
        try:
            first = await anext(events)
        except BaseException:
            self._count_request(chat, "error")
            raise
        if not isinstance(first, Started):
            await events.aclose()
            raise RuntimeError(f"backend {backend.info.kind} began with {first!r}, not Started")
        run = ChatRun(chat, events, first)
        reply = chat.prompt.reply or ReplyFormat()
        calls = calling(chat.tool_use)
        if calls is not None:
            names = frozenset(tool.name for tool in calls.tools)
            run.parser = make_tool_parser(reply.tools, calls.id_prefix, names)
        if reply.thinks and chat.text_prompt is None:
            run.splitter = ReasoningSplitter(reply)
        self.active[chat.id] = run
        return run

    async def abandon(self, run: ChatRun) -> None:
        """Close a started chat nobody will read (its stream ended before it was taken)."""
        self.active.pop(run.chat.id, None)
        run.done.set()
        await run.backend_events.aclose()
        self._count_request(run.chat, "cancelled")

    async def events(self, run: ChatRun) -> AsyncGenerator[TokenEvent, None]:
        """The generation's tokens; closes the backend's stream if the consumer stops early."""
        async with aclosing(self.events_with_progress(run)) as events:
            async for event in events:
                if isinstance(event, TokenEvent):
                    yield event

    async def events_with_progress(
        self, run: ChatRun
    ) -> AsyncGenerator[TokenEvent | PrefillProgress, None]:
        """The tokens and the prefill's progress (a sign of life before the first token)."""
        first_token_at: float | None = None
        failed = False
        try:
            async for event in run.backend_events:
                if isinstance(event, Finished):
                    run.finished = event
                    run.completion_tokens = event.completion_tokens
                    continue
                if isinstance(event, PrefillProgress):
                    yield event
                    continue
                if not isinstance(event, TokenEvent):
                    continue
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                    self._observe_first_token(run, first_token_at)
                run.completion_tokens += len(event.token_ids) or (1 if event.text else 0)
                yield event
            if run.interrupted and run.finished is None:
                raise ShuttingDownError()
        except Exception as exc:  # not GeneratorExit or CancelledError: those are "cancelled"
            failed = True
            if run.interrupted and not isinstance(exc, ShuttingDownError):
                raise ShuttingDownError() from exc  # (an upstream stream cut by the abort)
            raise
        finally:
            self.active.pop(run.chat.id, None)
            run.done.set()
            await run.backend_events.aclose()
            outcome = "ok" if run.finished else "error" if failed else "cancelled"
            self._count_request(run.chat, outcome)
            self._count_tokens(run, first_token_at)

    async def drain(self, grace_seconds: float) -> None:
        """Shutting down: no new chats; running ones may finish within the grace period,
        then each is stopped (its stream ends with a finish reason and an error event)."""
        self.closing = True
        running = list(self.active.values())
        if running:
            await asyncio.wait(
                [asyncio.ensure_future(run.done.wait()) for run in running],
                timeout=grace_seconds,
            )
        late = [run for run in self.active.values() if not run.done.is_set()]
        for run in late:
            run.interrupted = True
            await run.chat.tier.backend.abort(run.chat.id)
        if late:
            await asyncio.wait(
                [asyncio.ensure_future(run.done.wait()) for run in late],
                timeout=DRAIN_STOP_SECONDS,
            )

    def _observe_first_token(self, run: ChatRun, at: float) -> None:
        chat = run.chat
        waited = at - chat.arrived
        cache = "warm" if run.started.cached_tokens else "cold"
        self.metrics.time_to_first_token.labels(chat.tier.backend.info.model_id, cache).observe(
            waited
        )
        self.metrics.tier_time_to_first_token.labels(
            chat.tier.name, chat.tier.backend.info.kind
        ).observe(waited)

    def _count_request(self, chat: PreparedChat, outcome: str) -> None:
        self.metrics.tier_requests.labels(
            chat.tier.name, chat.tier.backend.info.kind, outcome
        ).inc()

    def _count_tokens(self, run: ChatRun, first_token_at: float | None) -> None:
        tier, kind = run.chat.tier.name, run.chat.tier.backend.info.kind
        model = run.chat.tier.backend.info.model_id
        prompt, cached = run.prompt_tokens, run.cached_tokens
        self.metrics.prompt_tokens.labels(model).inc(prompt)
        self.metrics.prompt_tokens_cached.labels(model).inc(cached)
        self.metrics.prompt_tokens_computed.labels(model).inc(max(prompt - cached, 0))
        self.metrics.generation_tokens.labels(model).inc(run.completion_tokens)
        self.metrics.tier_tokens.labels(tier, kind, "prompt").inc(prompt)
        self.metrics.tier_tokens.labels(tier, kind, "generation").inc(run.completion_tokens)
        if run.drafted is not None:
            method = run.drafted.method
            self.metrics.speculative_drafted.labels(tier, method).inc(run.drafted.drafted)
            self.metrics.speculative_accepted.labels(tier, method).inc(run.drafted.accepted)
        if first_token_at is not None and run.completion_tokens > 1:
            elapsed = time.perf_counter() - first_token_at
            if elapsed > 0:
                self.metrics.decode_tokens_per_second.labels(model).observe(
                    (run.completion_tokens - 1) / elapsed
                )

    async def replies(self, run: ChatRun) -> AsyncGenerator[ReplyStep, None]:
        """The reply as it grows: reasoning, text and tool-call pieces, with log-probabilities."""
        parser, splitter = run.parser, run.splitter

        def answer(text: str) -> list[ReplyPiece]:
            return parser.feed(text) if parser else [TextPiece(text)]

        budget = _ReplyBudget(run.chat.reply_budget)
        async with aclosing(self.events(run)) as events:
            async for event in events:
                pieces: list[ReplyPiece | ReasoningPiece] = []
                if splitter is None:
                    pieces.extend(answer(event.text))
                else:
                    reasoning = splitter.in_reasoning
                    for channel, text in splitter.feed(event.text):
                        pieces.extend(
                            [ReasoningPiece(text)] if channel == "reasoning" else answer(text)
                        )
                    if reasoning or splitter.in_reasoning:  # its markers count as reasoning
                        run.reasoning_tokens += len(event.token_ids) or 1
                pieces = [p for p in pieces if not isinstance(p, TextPiece) or p.text]
                if pieces or event.logprobs:
                    yield ReplyStep(pieces, event.logprobs)
                spent = budget.spent(pieces, len(event.token_ids) or 1, bool(event.text))
                if spent and run.finished is None:
                    # The client's max_tokens is used up (a call's wrapper aside): the reply
                    # ends here, as the backend would have ended it without the room.
                    run.finished = Finished(
                        "length", run.prompt_tokens, run.completion_tokens, run.cached_tokens
                    )
                    break
        rest: list[ReplyPiece | ReasoningPiece] = []
        for channel, text in splitter.finish() if splitter else []:
            rest.extend([ReasoningPiece(text)] if channel == "reasoning" else answer(text))
        if parser is not None:
            rest.extend(parser.finish())
        if rest:
            yield ReplyStep(rest)

    async def collect(self, run: ChatRun) -> ChatResult:
        """The whole reply, once it has ended."""
        text: list[str] = []
        reasoning: list[str] = []
        logprobs: list[TokenChoice] = []
        async with aclosing(self.replies(run)) as steps:
            async for step in steps:
                text.append(step.text)
                reasoning.append(step.reasoning)
                logprobs.extend(step.logprobs)
        calls = run.parser.calls if run.parser else []
        return ChatResult(
            "".join(text),
            calls,
            logprobs,
            run.finish_reason,
            run.stop_sequence,
            "".join(reasoning),
        )

"""The request-level seam: every tier's engine behind one async interface.

A backend takes a whole request (template messages, sampling parameters, priority, session,
id) and streams typed events back; it can be aborted, health-checked, and it declares what
it is and can do (``info``, frozen when it is built). The whole interface::

    info            kind, tier, model and capabilities (``BackendInfo``)
    limits()        the model's context and vocabulary, once known (``ModelLimits``)
    render()        messages (+ functions) to the prompt it will feed; render_text(): a raw text
    generate()      a request in, its events out; abort(): stop one from another task
    health()        loaded / reachable, and what it holds; close()
    warmer()        the typing hints' part (``Warmer``), or None where it cannot pre-compute
    embedder()      the embeddings' part (``Embedder``), or None where it does not embed

The optional parts are reached through their typed accessors, never by probing attributes. Modelled on vLLM's ``EngineClient`` (``generate`` / ``abort`` / ``check_health``)
and TGI's ``Backend``. Three kinds sit behind it, side by side:

* ``mlx``: a local model in this Mac's one inference slot (``gateway.engines.local``:
  the token-level model runner, the shared scheduler and the prefix KV-cache store);
* ``openai``: an OpenAI-compatible upstream server over HTTP (``gateway.engines.upstream``);
* ``peer``: another gateway on the LAN, which takes a request as a ticket: not a tier of its
  own but a wrapper around a tier's backend (``gateway.peers.dispatch.PeerDispatch``) that
  sends a request carrying a ``ticket`` to a peer with a free seat when this node's slot is
  taken, and runs it on the wrapped backend otherwise.

The event union, in the order a generation produces it::

    Started ──▶ PrefillProgress* ──▶ TokenEvent* ──▶ Finished

Nothing here knows HTTP, pydantic or MLX.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal, Protocol

from gateway.errors import InvalidRequestError
from gateway.seam.embedding import EmbeddingInput, Embeddings
from gateway.seam.reasoning import ReplyFormat
from gateway.seam.request_parts import ChatMessage, Grammar, ToolSpec

__all__ = [
    "Backend",
    "BackendEvent",
    "BackendHealth",
    "BackendInfo",
    "BackendKind",
    "Capabilities",
    "Described",
    "Embedder",
    "FinishReason",
    "Finished",
    "GenerationRequest",
    "ModelLimits",
    "PrefillProgress",
    "Priority",
    "Prompt",
    "SamplingParams",
    "Started",
    "TextPrompt",
    "TicketSpec",
    "TokenChoice",
    "TokenEvent",
    "TokenLogprob",
    "Warmer",
    "Warmup",
]

FinishReason = Literal["stop", "length"]
BackendKind = Literal["mlx", "openai", "mlx-distributed", "peer"]
# A part of a health report as JSON-like data (``BackendHealth.weights``, ``.batch``, ``.cluster``).
Described = dict[str, object]


class Priority(IntEnum):
    """Priority classes, most urgent first (a lower value wins)."""

    USER = 0  # the person at the keyboard
    TASK = 1  # foreground work the user asked for
    BACKGROUND = 2  # summaries, audits, batch work

    @classmethod
    def parse(cls, value: str | None, default: Priority) -> Priority:
        if value is None or value == "":
            return default
        try:
            return cls[value.strip().upper()]
        except KeyError:
            names = ", ".join(p.name.lower() for p in cls)
            raise InvalidRequestError(
                f"unknown priority {value[:40]!r}; use one of: {names}", param="priority"
            ) from None

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens, free of any wire format.

    ``max_tokens`` None lets the backend decide (a local one: the rest of the context).
    """

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # Multiplicative, over the last tokens of the completion (mlx-lm's, llama.cpp's and
    # Ollama's repeat penalty); None: off.
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    top_k: int = 0  # 0: no top-k filtering
    grammar: Grammar | None = None
    # Log-probabilities of the chosen tokens and of this many alternatives (0-20); None: off.
    logprobs: int | None = None
    # Tokens the reasoning section may take before its end marker is forced; None: no limit.
    reasoning_budget: int | None = None
    # The reply opens its reasoning section (the template switched thinking on and leaves
    # the opening to the model): its first token is the start marker.
    open_reasoning: bool = False


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; services check these instead of the backend's kind."""

    prefix_cache: bool = False  # reuses KV caches of earlier prompts
    typing_hints: bool = False  # can pre-prefill while the user types (``warmer()``)
    structured_output: bool = False  # constrained decoding (also what tool calls need)
    logprobs: bool = False  # TokenEvent carries log-probabilities when asked
    text_prompts: bool = False  # takes a raw text prompt (legacy completions)
    token_ids: bool = False  # TokenEvent carries the ids of the tokens
    local_slot: bool = False  # computes in this Mac's one inference slot


@dataclass(frozen=True)
class BackendInfo:
    """What a backend is, fixed when it is built; services read this, never its class."""

    kind: BackendKind
    tier: str  # the tier it serves
    model_id: str  # the model it runs (a local reference, an upstream's model name)
    capabilities: Capabilities


@dataclass(frozen=True)
class ModelLimits:
    """The model's token limits as far as they are known now (None: not known).

    Not part of ``BackendInfo``: a local model's are known only once it has loaded (and kept
    across unloads); an upstream's context comes from its settings and its vocabulary is
    never known.
    """

    context_length: int | None = None  # tokens of context
    vocab_size: int | None = None  # token ids run from 0 to this (for ``logit_bias``)


@dataclass(frozen=True)
class Prompt:
    """A conversation as the backend will feed it: tokens when the backend renders locally.

    Remote backends render prompts themselves; their ``tokens`` is None. ``reply`` says how
    the model's reply to it is laid out (reasoning section, tool-call format); None: plain
    text, Hermes calls.
    """

    tokens: tuple[int, ...] | None = None
    reply: ReplyFormat | None = None


@dataclass(frozen=True)
class TextPrompt:
    """A raw text prompt, fed without a chat template (legacy completions)."""

    text: str


@dataclass(frozen=True)
class TicketSpec:
    """What a request is as a ticket for a peer: a task type and its text arguments."""

    task_type: str
    args: dict[str, str]


@dataclass(frozen=True)
class GenerationRequest:
    """One request to a backend."""

    id: str
    messages: tuple[ChatMessage, ...]
    params: SamplingParams
    priority: Priority = Priority.USER
    session: str | None = None
    prompt: Prompt = Prompt()
    # Functions described to the model (rendered by the backend with the conversation).
    tools: tuple[ToolSpec, ...] = ()
    # Set for a legacy completion: the prompt is this text, ``messages`` is empty.
    text_prompt: TextPrompt | None = None
    # Completion tokens already generated elsewhere (a peer that failed mid-stream): the
    # generation continues after them, their text is not sent again, and they count in usage.
    resume: tuple[int, ...] = ()
    # The start of an answer computed ahead (typing hints): any other job cancels it.
    speculative: bool = False
    # What the request is as a ticket for a peer (None: it runs on this node only).
    ticket: TicketSpec | None = None


# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """The request holds its compute (the slot, or an upstream's answer); first event."""

    prompt_tokens: int | None  # None: the backend does not know before the end
    cached_tokens: int = 0
    node: str | None = None  # the peer that computes it (None: this node)


@dataclass(frozen=True)
class PrefillProgress:
    """A chunk of the prompt was prefilled: no token yet, but a point to pause or cancel."""

    tokens_done: int


@dataclass(frozen=True)
class TokenLogprob:
    """A token as text and bytes (a token may hold part of a character) and its log-probability."""

    token: str
    token_bytes: bytes
    logprob: float


@dataclass(frozen=True)
class TokenChoice:
    """A generated token's log-probability and the most likely alternatives at its step."""

    chosen: TokenLogprob
    top: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    """New text (possibly empty) and the ids of the tokens that produced it.

    ``logprobs`` has one entry per token id when the request asked for them.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[TokenChoice, ...] = ()


@dataclass(frozen=True)
class Drafted:
    """Speculative decoding's share of a generation: ``method`` ("lookup", "draft_model")
    drafted ``drafted`` tokens, of which the model accepted ``accepted``."""

    method: str
    drafted: int
    accepted: int


@dataclass(frozen=True)
class Finished:
    """The last event: why the generation ended, and its usage."""

    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    stop_sequence: str | None = None  # the stop string that ended it, if one did
    drafted: Drafted | None = None  # where the tokens were drafted and verified


BackendEvent = Started | PrefillProgress | TokenEvent | Finished


@dataclass(frozen=True)
class BackendHealth:
    """``loaded``: weights in memory (local) or the upstream answers (remote)."""

    kind: BackendKind
    model: str
    loaded: bool
    state: str  # "loaded" | "unloaded" | "loading" | "reachable" | "unreachable"
    memory_bytes: int = 0
    detail: str | None = None
    # Local tiers: how the weights are held ({"mode", "bytes", "reason"}, gateway.engines.weights).
    weights: Described | None = None
    # Local tiers: speculative decoding ("lookup", "off", "draft_model <reference>").
    speculation: str | None = None
    # Local tiers, loaded: how many generations decode together and what bounds it.
    batch: Described | None = None
    # Local tiers, loaded: whether a decode step's pass is compiled, and why not
    # ({"compiled", "reason"}, gateway.engines.compiled_step).
    decode_step: Described | None = None
    # Distributed tiers: the cluster's ranks, hosts, state and restarts (gateway.engines.distributed).
    cluster: Described | None = None


class Backend(Protocol):
    """The engine behind one tier."""

    @property
    def info(self) -> BackendInfo: ...

    def limits(self) -> ModelLimits:
        """The model's context and vocabulary, as far as they are known now."""
        ...

    async def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        thinking: bool | None = None,
    ) -> Prompt:
        """The prompt the backend will feed for ``messages`` and the functions described to
        the model (tokens only if it renders). ``thinking``: the template's thinking switch
        (``enable_thinking``) where it has one; None: the template's default."""
        ...

    async def render_text(self, prompt: TextPrompt) -> Prompt:
        """The prompt of a raw text (``capabilities.text_prompts``)."""
        ...

    def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        """Stream the request's events; closing the iterator cancels the work.

        Errors before ``Started`` (queue full, waited too long, upstream refused) are raised
        from the first ``anext``, so a caller can still answer with an error status.
        """
        ...

    async def abort(self, request_id: str) -> bool:
        """Stop a request from another task; False if it is not running here."""
        ...

    async def health(self) -> BackendHealth: ...

    async def close(self) -> None: ...

    def warmer(self) -> Warmer | None:
        """The part that pre-computes while the user types; None where it cannot
        (``capabilities.typing_hints`` is False)."""
        ...

    def embedder(self) -> Embedder | None:
        """The part that embeds texts; None where it does not."""
        ...


class Warmup(Protocol):
    """A pre-prefill in flight (typing hints): follow ``events``, or ``cancel`` it."""

    def events(self) -> AsyncIterator[BackendEvent]:
        """``Started`` (with the cached tokens) when it holds the slot, then progress; the
        iterator ends normally once the cache is complete, or raises if it failed."""
        ...

    def cancel(self) -> None: ...

    @property
    def completed(self) -> bool:
        """True once the whole prefix is in the cache."""
        ...


class Warmer(Protocol):
    """A backend's typing-hints part (``Backend.warmer()``): it renders what is fixed of a
    conversation and pre-prefills it into the prefix cache. The slot's gates that a hint
    holds meanwhile are the scheduler's (``gateway.scheduler.gates.TypingGates``)."""

    async def render_fixed_prefix(
        self, messages: Sequence[ChatMessage], draft: str | None, tools: Sequence[ToolSpec] = ()
    ) -> tuple[int, ...]:
        """Tokens of what is already fixed: the functions, the conversation and the draft's
        whole words."""
        ...

    async def warm(self, hint_id: str, tokens: Sequence[int], session: str | None = None) -> Warmup:
        """Queue a pre-prefill of ``tokens`` into the prefix cache (raises 429 when full)."""
        ...


class Embedder(Protocol):
    """A backend's embeddings part (``Backend.embedder()``; ``gateway.seam.embedding``)."""

    async def embed(
        self, inputs: Sequence[EmbeddingInput], priority: Priority = Priority.TASK
    ) -> Embeddings:
        """All ``inputs`` as one job in the slot. Raises InvalidRequestError (param
        ``input[i]``) for an empty input, a token id outside the vocabulary, or an input
        longer than the context."""
        ...

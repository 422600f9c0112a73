"""Typing hints: pre-prefill the fixed part of a conversation while the user types.

A hint renders everything already fixed (system prompt, history, and with ``draft`` the
whole words typed so far) to tokens and queues a ``user``-class prefill job that leaves the
KV cache in the prefix store. When the real chat request arrives it is matched to hints by
tokens, following the design's state machine (``shared/MISSION.md`` point 3)::

    queued ──▶ computing ──▶ ready ──▶ used
      │            │           │
      └────────────┴───────────┴──▶ aborted | superseded | expired

* queued when the request comes: the pre-prefill is aborted, the request runs normally;
* computing: the request waits for it (throwing half-computed work away is waste);
* ready: the request uses the warm cache.

The cache itself is found by token prefix in the backend's store, so a hint that does not
match the request is simply not used. While a hint is queued, computing or ready it holds
the slot's prefill freeze; each hint also (re)closes the typing lock, both through the
scheduler's ``TypingGates`` handle (one slot, so one set of gates for every tier). Hints work
on tiers whose backend can warm a cache (``capabilities.typing_hints``); this service reaches
them only through the request-level seam (the backend's ``warmer()``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.engines.context_length import check_context_length
from gateway.engines.token_prefix import common_prefix
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.metrics import HintMetrics
from gateway.protocol.hints import TypingHint, TypingHintRequest
from gateway.protocol.openai import shorten
from gateway.scheduler.gates import TypingGates
from gateway.seam.backend import SamplingParams, Started, Warmer, Warmup
from gateway.seam.request_parts import ChatMessage, ToolSpec
from gateway.serving.messages import template_messages, tool_specs
from gateway.serving.speculation import GREEDY, Speculation, Speculator
from gateway.serving.tiers import Tier, TierRegistry
from gateway.tasks.catalogue import TaskPrompts

log = logging.getLogger(__name__)

# A hint still counts as matching a request whose prompt diverges this many tokens before
# the hint's end (templates may render the end of the last fixed turn differently).
TEMPLATE_SLACK_TOKENS = 4
KEEP_ENDED_HINTS = 256


class PrefillState(StrEnum):
    QUEUED = "queued"
    COMPUTING = "computing"
    READY = "ready"
    USED = "used"
    ABORTED = "aborted"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"


ACTIVE = frozenset({PrefillState.QUEUED, PrefillState.COMPUTING, PrefillState.READY})


@dataclass(eq=False)
class Hint:
    id: str
    tier: str
    model: str  # the name the client used (or the default tier's)
    session: str | None
    tokens: tuple[int, ...]
    created_at: float
    expires_at: float  # until ready: an estimate (idle time counts from readiness)
    state: PrefillState = PrefillState.QUEUED
    cached_tokens: int = 0
    warmup: Warmup | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    mismatch_counted: bool = False
    expiry: asyncio.TimerHandle | None = None
    # What a speculation answers: the conversation with the draft as the last user message.
    answer_to: tuple[ChatMessage, ...] = ()
    sampling: SamplingParams = GREEDY  # the request's, as the hint declares it
    tools: tuple[ToolSpec, ...] = ()
    speculated_tokens: int | None = None

    def view(self) -> TypingHint:
        return TypingHint(
            id=self.id,
            state=self.state.value,
            speculated=self.speculated_tokens,
            model=self.model,
            session=self.session,
            prefix_tokens=len(self.tokens),
            cached_tokens=self.cached_tokens,
            created_at=int(self.created_at),
            expires_at=int(self.expires_at),
        )


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    # (A loop in Python over a 32K-token conversation took ~1.6 ms here: issue 32.)
    return common_prefix(a, b, max(len(a), len(b)))


# A stored Responses conversation as messages, by response id and instructions
# (``gateway.serving.responses.ResponseHistory.messages``).
StoredConversation = Callable[[str, str | None], Awaitable[tuple[ChatMessage, ...]]]


class HintService:
    """Owns the typing hints and their pre-prefill jobs."""

    def __init__(
        self,
        registry: TierRegistry,
        metrics: HintMetrics,
        idle_seconds: float,
        task_prompts: TaskPrompts[Tier] | None = None,
        speculator: Speculator | None = None,
        stored_conversation: StoredConversation | None = None,
        *,
        gates: TypingGates,
    ) -> None:
        self.registry = registry
        self.gates = gates  # the slot's typing lock and prefill freeze
        self.speculator = speculator
        self.metrics = metrics
        self.idle_seconds = idle_seconds
        self.task_prompts = task_prompts
        self.hints: dict[str, Hint] = {}
        self.by_session: dict[str, Hint] = {}
        self._followers: set[asyncio.Task[None]] = set()
        # Hints may name a previous_response_id: its stored conversation comes first.
        self.stored_conversation = stored_conversation

    # -- the hint API ----------------------------------------------------------------------------

    async def post(self, request: TypingHintRequest) -> Hint:
        messages, tier, warmer = await self._warmable_conversation(request)
        tools = tool_specs(request.tools)
        tokens = await warmer.render_fixed_prefix(messages, request.draft, tools)
        context = tier.backend.limits().context_length
        if context is not None:  # room for the answer's first token
            check_context_length(context, len(tokens))
        now = time.time()
        hint = Hint(
            id=f"hint-{uuid.uuid4().hex[:20]}",
            tier=tier.name,
            model=request.model or tier.name,
            session=request.session,
            tokens=tuple(tokens),
            created_at=now,
            expires_at=now + self.idle_seconds,
            tools=tools,
        )
        if request.task is None and request.draft and request.draft.strip():
            hint.sampling = SamplingParams(
                temperature=request.temperature or 0.0,
                top_p=1.0 if request.top_p is None else request.top_p,
                seed=request.seed,
                # What the request will be given where it sets none, as its draws are.
                repetition_penalty=tier.repetition_penalty_for(None),
            )
            if hint.sampling.temperature == 0 or request.seed is not None:  # reproducible
                hint.answer_to = (*messages, {"role": "user", "content": request.draft})
        self.gates.note_typing(hint.id)
        self.gates.hold_prefill_freeze(hint.id)
        try:
            hint.warmup = await warmer.warm(hint.id, tokens, request.session)
        except GatewayError:
            self.gates.release_prefill_freeze(hint.id)
            raise
        previous = self.by_session.get(request.session) if request.session else None
        if previous is not None and previous.state in ACTIVE:
            self._end(previous, PrefillState.SUPERSEDED)
        self._remember(hint)
        self.metrics.typing_hints_posted.inc()
        follower = asyncio.create_task(self._follow(hint), name=f"follow {hint.id}")
        self._followers.add(follower)
        follower.add_done_callback(self._followers.discard)
        return hint

    async def _warmable_conversation(
        self, request: TypingHintRequest
    ) -> tuple[tuple[ChatMessage, ...], Tier, Warmer]:
        """The hint's whole conversation (a stored one it continues first), its tier and
        the tier's warmer (a tier that cannot warm a cache is refused)."""
        messages, tier = self._conversation(request)
        if request.previous_response_id is not None:
            if self.stored_conversation is None:
                raise InvalidRequestError(
                    "this gateway stores no responses", param="previous_response_id"
                )
            stored = await self.stored_conversation(
                request.previous_response_id, request.instructions
            )
            messages = (*stored, *messages)
        info, warmer = tier.backend.info, tier.backend.warmer()
        if warmer is None or not info.capabilities.typing_hints:
            raise InvalidRequestError(
                f"tier {tier.name!r} ({info.kind} backend) cannot pre-compute typing "
                "hints; use a local tier",
                param="model",
            )
        return messages, tier, warmer

    def _conversation(self, request: TypingHintRequest) -> tuple[tuple[ChatMessage, ...], Tier]:
        """The messages a hint warms and the tier that will run them."""
        if request.task is None:
            messages = template_messages(request.messages or [])
            return messages, self.registry.resolve(request.model)
        prompts = self.task_prompts
        if prompts is None:
            raise InvalidRequestError("this gateway has no task types", param="task")
        task = prompts.get(request.task.type)
        model = request.model
        tier = prompts.tier_of(task) if model is None else self.registry.resolve(model)
        return prompts.hint_messages(task, request.task.args), tier

    def drop_all(self) -> None:
        """Shutting down: every active hint is aborted (its freeze released)."""
        for hint in list(self.hints.values()):
            if hint.state in ACTIVE:
                self._end(hint, PrefillState.ABORTED)

    def get(self, hint_id: str) -> Hint:
        try:
            return self.hints[hint_id]
        except KeyError:
            raise NotFoundError(f"no typing hint {shorten(hint_id)!r}", param="id") from None

    def abort(self, hint_id: str) -> Hint:
        """The client withdraws its hint: nothing is announced any more, so its keystrokes
        hold no background work either."""
        hint = self.get(hint_id)
        if hint.state in ACTIVE:
            self._typing_over(hint)
            self._end(hint, PrefillState.ABORTED)
        return hint

    # -- joining a chat request ------------------------------------------------------------------

    async def join(self, tier: str, prompt: Sequence[int], session: str | None) -> None:
        """Settle the hints a chat request to ``tier`` may use, before it is queued."""
        for hint in list(self.hints.values()):
            if hint.state not in ACTIVE or hint.tier != tier:
                continue
            if session is not None and hint.session != session:
                continue
            matched = common_prefix_length(hint.tokens, prompt)
            if matched < max(1, len(hint.tokens) - TEMPLATE_SLACK_TOKENS):
                if not hint.mismatch_counted:
                    hint.mismatch_counted = True
                    self.metrics.typing_hints.labels("mismatched").inc()
                continue
            # The request this hint announced has come: the typing it signalled is over (a
            # hinted background task must not wait out its own keystrokes' quiet time).
            self._typing_over(hint)
            if hint.state is PrefillState.QUEUED:
                self._end(hint, PrefillState.ABORTED)  # not started: run the request normally
                continue
            if hint.state is PrefillState.COMPUTING:
                await hint.finished.wait()
            if hint.state is PrefillState.READY:
                self._end(hint, PrefillState.USED)

    # -- internals -------------------------------------------------------------------------------

    async def _follow(self, hint: Hint) -> None:
        assert hint.warmup is not None
        try:
            async for event in hint.warmup.events():
                if isinstance(event, Started) and hint.state is PrefillState.QUEUED:
                    hint.state = PrefillState.COMPUTING
                    hint.cached_tokens = event.cached_tokens
        except GatewayError as exc:  # e.g. waited too long for the slot
            log.info("typing hint %s: prefill failed: %s", hint.id, exc.message)
        except Exception:
            log.exception("typing hint %s: prefill failed", hint.id)
        finally:
            if hint.state is PrefillState.COMPUTING and hint.warmup.completed:
                hint.state = PrefillState.READY
                self._schedule_speculation(hint)
                # Idle from now on: a hint never expires while it waits for or holds the slot.
                hint.expires_at = time.time() + self.idle_seconds
                hint.expiry = asyncio.get_running_loop().call_later(
                    self.idle_seconds, self._expire, hint
                )
            elif hint.state in (PrefillState.QUEUED, PrefillState.COMPUTING):
                self._end(hint, PrefillState.ABORTED)
            hint.finished.set()

    def _schedule_speculation(self, hint: Hint) -> None:
        speculator = self.speculator
        if speculator is None or not hint.answer_to:
            return
        tier = self.registry.resolve(hint.tier)
        pause_left = speculator.after_seconds - (time.time() - hint.created_at)
        speculator.schedule(
            hint.id,
            hint.tier,
            hint.session,
            tier.backend,
            hint.answer_to,
            hint.tools,
            hint.sampling,
            pause_left,
        )

        def note(task: asyncio.Task[None]) -> None:
            hint.speculated_tokens = speculator.speculated_tokens(hint.id)

        speculation = speculator.by_hint.get(hint.id)
        if speculation is not None and speculation.task is not None:
            speculation.task.add_done_callback(note)

    async def take_speculation(
        self, tier: str, prompt: Sequence[int], params: SamplingParams, session: str | None
    ) -> Speculation | None:
        """The speculated start of the answer to exactly this request, if there is one."""
        if self.speculator is None:
            return None
        return await self.speculator.take(tier, prompt, params, session)

    def _end(self, hint: Hint, state: PrefillState) -> None:
        if self.speculator is not None:
            reason = "unused" if state is PrefillState.USED else state.value
            self.speculator.cancel(hint.id, reason)
        hint.state = state
        if hint.warmup is not None and not hint.warmup.completed:
            hint.warmup.cancel()
        if hint.expiry is not None:
            hint.expiry.cancel()
        self.gates.release_prefill_freeze(hint.id)
        self.metrics.typing_hints.labels(state.value).inc()
        if self.by_session.get(hint.session or "") is hint:
            del self.by_session[hint.session or ""]

    def _typing_over(self, hint: Hint) -> None:
        self.gates.end_typing(hint.id)

    def _expire(self, hint: Hint) -> None:
        if hint.state in ACTIVE:
            self._end(hint, PrefillState.EXPIRED)

    def _remember(self, hint: Hint) -> None:
        self.hints[hint.id] = hint
        if hint.session:
            self.by_session[hint.session] = hint
        ended = [h for h in self.hints.values() if h.state not in ACTIVE]
        for old in ended[: max(0, len(ended) - KEEP_ENDED_HINTS)]:
            del self.hints[old.id]

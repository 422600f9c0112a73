"""The receiving side of tickets: who may send them, and whether this node has a free seat.

A ticket is accepted only when it is signed with the shared secret (``signing``), names the
same task definitions (``tasks_hash``) and protocol, and this node's slot would take it now;
a busy node answers 429, so that the sender tries another seat instead of queueing twice.
The ticket then runs as the task it names, built from this node's own ``prompts/``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass

from pydantic import BaseModel

from gateway.errors import (
    AuthenticationError,
    ConflictError,
    GatewayError,
    QueueFullError,
)
from gateway.metrics import PeerMetrics
from gateway.peers.signing import (
    ANSWER_SIGNATURE,
    NONCE,
    TASKS_HASH,
    PeerAuthError,
    RequestVerifier,
    ResponseSigner,
    sign_answer,
)
from gateway.protocol.peer import (
    Hello,
    SlotState,
    Ticket,
    TicketError,
    TicketProgress,
    TicketResult,
    TicketStarted,
    TicketToken,
    TicketUsage,
)
from gateway.protocol.tasks import TaskRunRequest
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import PrefillProgress, Priority
from gateway.serving.tasks import TaskRun, TaskService

log = logging.getLogger(__name__)


@dataclass
class PeerInbox:
    verifier: RequestVerifier
    tasks: TaskService
    scheduler: Scheduler
    metrics: PeerMetrics
    node_id: str
    version: str

    def check(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> None:
        """Refuse (401/409) what is not signed with our secret or not built from our prompts."""
        try:
            self.verifier.verify(method, path, headers, body)
        except PeerAuthError as exc:
            self.metrics.peer_auth_refused.labels(exc.reason).inc()
            log.warning("peer request refused (%s): %s", exc.reason, exc)
            raise AuthenticationError(f"peer request refused: {exc}") from None
        ours = self.tasks.prompts.catalog.hash
        theirs = headers.get(TASKS_HASH, "")
        if theirs != ours:
            self.metrics.peer_auth_refused.labels("tasks_hash").inc()
            log.warning(
                "peer request refused: its tasks_hash %s is not ours %s", theirs[:12], ours[:12]
            )
            raise ConflictError(
                f"the task definitions differ (tasks_hash {theirs[:12] or 'missing'}, ours "
                f"{ours[:12]}): this node would build other prompts",
                param="tasks_hash",
            )

    def answer_headers(
        self, headers: Mapping[str, str], status: int, body: bytes
    ) -> dict[str, str]:
        """The header that signs a whole answer to the (checked) request with ``headers``."""
        secret = self.verifier.secret.decode()
        return {ANSWER_SIGNATURE: sign_answer(secret, headers.get(NONCE, ""), status, body)}

    def response_signer(self, headers: Mapping[str, str]) -> ResponseSigner:
        """Signs the answer to the (checked) request with these headers."""
        return ResponseSigner(self.verifier.secret.decode(), headers.get(NONCE, ""))

    def hello(self) -> Hello:
        prompts = self.tasks.prompts
        registry = self.tasks.chat.registry
        slot = self.scheduler.view()
        return Hello(
            node_id=self.node_id,
            version=self.version,
            tasks_hash=prompts.catalog.hash,
            tiers={name: registry.resolve(name).backend.info.model_id for name in registry.tiers},
            task_models={
                task_id: prompts.tier_of(task).backend.info.model_id
                for task_id, task in prompts.catalog.tasks.items()
            },
            slot=SlotState(busy=not slot.idle, queues=dict(slot.queued)),
        )

    async def accept(self, ticket: Ticket) -> TaskRun:
        """Start the ticket in this node's slot, or refuse it (429 when the seat is taken)."""
        task = self.tasks.prompts.get(ticket.task_type)
        priority = Priority.parse(task.spec.priority, Priority.TASK)
        if self.scheduler.would_wait(priority):
            self.metrics.peer_tickets_received.labels("busy").inc()
            raise QueueFullError("this node's slot is taken; try another seat", retry_after=1)
        try:
            task, prepared = await self.tasks.prepare(
                ticket.task_type, TaskRunRequest(args=dict(ticket.args)), ticket.ticket_id
            )
            return await self.tasks.start(task, prepared)
        except GatewayError:
            self.metrics.peer_tickets_received.labels("refused").inc()
            raise

    async def events(self, run: TaskRun) -> AsyncGenerator[BaseModel, None]:
        """The ticket's events: started, progress, tokens (text and ids), then the result."""
        chat = run.chat
        outcome = "cancelled"
        try:
            yield TicketStarted(
                ticket_id=chat.chat.id,
                prompt_tokens=chat.prompt_tokens,
                cached_tokens=chat.cached_tokens,
            )
            async with aclosing(self.tasks.chat.events_with_progress(chat)) as events:
                async for event in events:
                    if isinstance(event, PrefillProgress):
                        yield TicketProgress(tokens_done=event.tokens_done)
                        continue
                    run.splitter.feed(event.text)
                    yield TicketToken(text=event.text, token_ids=list(event.token_ids))
            run.splitter.finish()
            result = self.tasks.result(run)
            yield TicketResult(
                ticket_id=chat.chat.id,
                output=result.output,
                thinking=result.thinking,
                finish_reason=result.finish_reason,
                usage=TicketUsage(
                    prompt_tokens=chat.prompt_tokens,
                    completion_tokens=chat.completion_tokens,
                    cached_tokens=chat.cached_tokens,
                ),
            )
            outcome = "ok"
        except GatewayError as exc:
            outcome = "error"
            yield TicketError(status=exc.status_code, message=exc.message)
        finally:
            self.metrics.peer_tickets_received.labels(outcome).inc()

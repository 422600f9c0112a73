"""The ticket protocol between gateways (gateway extension): pydantic models of the wire.

Going out, a ticket is a ticket id, a task type, a streaming flag and text arguments, and
nothing else: the receiving node derives tier, sampling and the whole prompt from its own
``prompts/`` (which is why both nodes must have the same task definitions, compared by hash).
Coming back, Server-Sent Events named after their ``type``: ``started``, ``progress`` (a
prompt chunk prefilled: the ticket is alive), ``token`` (text and token ids, so a failover
resumes from exact tokens), then ``result`` or ``error``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION = 1
MAX_TICKET_ARGUMENTS = 32


class Ticket(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    ticket_id: str = Field(min_length=1, max_length=100)
    task_type: str = Field(min_length=1, max_length=100)
    stream: bool = True
    args: dict[str, str] = Field(default_factory=dict, max_length=MAX_TICKET_ARGUMENTS)


class SlotState(BaseModel):
    busy: bool
    queues: dict[str, int]


class Hello(BaseModel):
    object: Literal["peer.hello"] = "peer.hello"
    node_id: str
    version: str
    protocol: int = PROTOCOL_VERSION
    tasks_hash: str
    tiers: dict[str, str] = Field(description="Tier name to its model id.")
    task_models: dict[str, str] = Field(description="Task type to the model id that runs it.")
    slot: SlotState


class TicketStarted(BaseModel):
    type: Literal["started"] = "started"
    ticket_id: str
    prompt_tokens: int
    cached_tokens: int = 0


class TicketProgress(BaseModel):
    type: Literal["progress"] = "progress"
    tokens_done: int


class TicketToken(BaseModel):
    type: Literal["token"] = "token"
    text: str
    token_ids: list[int]


class TicketUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


class TicketResult(BaseModel):
    type: Literal["result"] = "result"
    ticket_id: str
    output: Any = Field(description="Parsed JSON (JSON tasks) or text; null if cut.")
    thinking: str | None = None
    finish_reason: Literal["stop", "length"]
    usage: TicketUsage


class TicketError(BaseModel):
    type: Literal["error"] = "error"
    status: int
    message: str


TicketEvent = TicketStarted | TicketProgress | TicketToken | TicketResult | TicketError

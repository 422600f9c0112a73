"""The receiving side of tickets: who may send one, a busy seat, and the events a ticket
yields, on the task service over a fake backend and a stand-in scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    QueueFullError,
    ServiceUnavailableError,
    UnprocessableError,
)
from gateway.metrics import GatewayMetrics
from gateway.peers.inbox import PeerInbox
from gateway.peers.signing import NONCE, RequestVerifier, ResponseSigner, sign
from gateway.protocol.peer import Ticket, TicketError, TicketResult, TicketStarted, TicketToken
from gateway.scheduler.state import SchedulerView
from gateway.seam.backend import Priority
from gateway.serving.tasks import TaskService
from tests.unit.fake_tasks import ScriptedBackend, make_task_service

SECRET = "s" * 32
PATH = "/v1/peer/tickets"


class SeatStandIn:
    """What the inbox asks of the scheduler: would a job wait, its view (idle, the queues)."""

    def __init__(self, busy: bool = False) -> None:
        self.busy = busy
        self.asked: list[Priority] = []

    def view(self) -> SchedulerView:
        queued = {p.label: 0 for p in Priority}
        return SchedulerView(alive=True, slot_busy=self.busy, idle=not self.busy, queued=queued)

    def would_wait(self, priority: Priority) -> bool:
        self.asked.append(priority)
        return self.busy


def make_inbox(
    tmp_path: Path, busy: bool = False
) -> tuple[PeerInbox, TaskService, dict[str, ScriptedBackend]]:
    tasks, backends = make_task_service(tmp_path)
    for name, backend in backends.items():
        backend.model_id = f"model-of-{name}"
    seat = SeatStandIn(busy)
    inbox = PeerInbox(
        RequestVerifier(SECRET, 30),
        tasks,
        seat,  # type: ignore[arg-type]
        GatewayMetrics().peers,
        "node-b",
        "1.2.3",
    )
    return inbox, tasks, backends


def refused(inbox: PeerInbox, reason: str) -> float:
    return inbox.metrics.peer_auth_refused.labels(reason)._value.get()


def received(inbox: PeerInbox, outcome: str) -> float:
    return inbox.metrics.peer_tickets_received.labels(outcome)._value.get()


def ticket(**args: str) -> Ticket:
    return Ticket(ticket_id="chatcmpl-t1", task_type="verdict", args=args or {"answer": "42"})


def test_a_signed_request_built_from_our_prompts_is_let_in(tmp_path: Path) -> None:
    inbox, tasks, _ = make_inbox(tmp_path)
    ours = tasks.prompts.catalog.hash
    inbox.check("POST", PATH, sign(SECRET, "POST", PATH, b"{}", ours), b"{}")
    assert refused(inbox, "tasks_hash") == 0


def test_an_unsigned_or_forged_request_is_401_and_counted(tmp_path: Path) -> None:
    inbox, tasks, _ = make_inbox(tmp_path)
    with pytest.raises(AuthenticationError):
        inbox.check("POST", PATH, {}, b"{}")
    forged = sign("w" * 32, "POST", PATH, b"{}", tasks.prompts.catalog.hash)
    with pytest.raises(AuthenticationError):
        inbox.check("POST", PATH, forged, b"{}")
    assert refused(inbox, "unsigned") == 1 and refused(inbox, "signature") == 1


def test_a_sender_with_other_task_definitions_is_409(tmp_path: Path) -> None:
    inbox, _, _ = make_inbox(tmp_path)
    with pytest.raises(ConflictError) as conflict:
        inbox.check("POST", PATH, sign(SECRET, "POST", PATH, b"{}", "theirs"), b"{}")
    assert conflict.value.param == "tasks_hash" and refused(inbox, "tasks_hash") == 1


def test_the_answer_is_signed_for_the_request_s_nonce(tmp_path: Path) -> None:
    inbox, _, _ = make_inbox(tmp_path)
    headers = {NONCE: "n1"}
    signature = inbox.response_signer(headers).sign("token", "{}")
    assert ResponseSigner(SECRET, "n1").check("token", "{}", signature)
    assert not ResponseSigner(SECRET, "n2").check("token", "{}", signature)


def test_hello_names_the_node_its_models_tasks_and_seat(tmp_path: Path) -> None:
    inbox, tasks, _ = make_inbox(tmp_path, busy=True)
    hello = inbox.hello()
    assert (hello.node_id, hello.version) == ("node-b", "1.2.3")
    assert hello.tasks_hash == tasks.prompts.catalog.hash
    assert hello.tiers == {"fast": "model-of-fast", "slow": "model-of-slow"}
    assert hello.task_models == {"verdict": "model-of-slow", "chat": "model-of-fast"}
    assert hello.slot.busy and hello.slot.queues == {p.label: 0 for p in Priority}


async def test_a_busy_seat_is_429_before_any_work(tmp_path: Path) -> None:
    inbox, _, backends = make_inbox(tmp_path, busy=True)
    with pytest.raises(QueueFullError):
        await inbox.accept(ticket())
    assert inbox.scheduler.asked == [Priority.BACKGROUND]  # type: ignore[attr-defined]
    assert backends["slow"].requests == [] and received(inbox, "busy") == 1


async def test_a_ticket_runs_as_its_task_and_yields_started_tokens_result(
    tmp_path: Path,
) -> None:
    inbox, _, backends = make_inbox(tmp_path)
    events = [e async for e in inbox.events(await inbox.accept(ticket()))]
    assert isinstance(events[0], TicketStarted) and events[0].ticket_id == "chatcmpl-t1"
    tokens = [e for e in events if isinstance(e, TicketToken)]
    assert "".join(t.text for t in tokens) == "".join(ScriptedBackend.answer)
    assert [t.token_ids for t in tokens] == [[i] for i in range(len(tokens))]
    result = events[-1]
    assert isinstance(result, TicketResult) and result.ticket_id == "chatcmpl-t1"
    assert result.output == {"ok": True} and result.thinking == "fine"
    assert result.finish_reason == "stop" and result.usage.completion_tokens == len(tokens)
    assert backends["slow"].requests[0].ticket is None  # never sent on to another peer
    assert received(inbox, "ok") == 1


async def test_a_ticket_with_bad_arguments_or_an_unknown_task_is_refused(tmp_path: Path) -> None:
    inbox, _, backends = make_inbox(tmp_path)
    with pytest.raises(UnprocessableError):
        await inbox.accept(ticket(colour="red"))
    assert received(inbox, "refused") == 1
    with pytest.raises(NotFoundError):
        await inbox.accept(Ticket(ticket_id="t2", task_type="nope"))
    assert backends["slow"].requests == []


async def test_an_error_mid_ticket_is_a_ticket_error_event(tmp_path: Path) -> None:
    inbox, _, backends = make_inbox(tmp_path)
    backends["slow"].error = ServiceUnavailableError("the model was unloaded")
    events = [e async for e in inbox.events(await inbox.accept(ticket()))]
    assert isinstance(events[-1], TicketError)
    assert events[-1].status == 503 and "unloaded" in events[-1].message
    assert received(inbox, "error") == 1 and received(inbox, "ok") == 0


async def test_a_sender_that_leaves_counts_the_ticket_cancelled(tmp_path: Path) -> None:
    inbox, _, _ = make_inbox(tmp_path)
    events = inbox.events(await inbox.accept(ticket()))
    await anext(events)  # started
    await anext(events)  # a token
    await events.aclose()
    assert received(inbox, "cancelled") == 1 and received(inbox, "ok") == 0

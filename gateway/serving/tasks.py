"""Running task types: arguments in, the task's own prompt, sampling and grammar, a result out.

A task is a chat under the hood (static part as the system message, dynamic part as the user
message), so it shares the chat service's path: tiers, the slot, priorities, typing hints,
the prefix cache (the static part is byte-identical across calls, so its KV cache is reused)
and metrics. What is added here: argument checks, the grammar of the thinking section and
the output, and splitting the thinking from the output.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from gateway.errors import UnprocessableError
from gateway.protocol.openai import MAX_STOP_SEQUENCES, shorten
from gateway.protocol.tasks import (
    TaskDelta,
    TaskResult,
    TaskResultEvent,
    TaskRunRequest,
)
from gateway.seam.backend import Priority, SamplingParams, TicketSpec
from gateway.serving.chat import ChatRun, ChatService, FieldNames, PreparedChat
from gateway.serving.tiers import Tier
from gateway.tasks.catalogue import TaskPrompts
from gateway.tasks.definitions import TaskType
from gateway.tasks.thinking import ThinkingSplitter, parse_output, task_grammar


@dataclass
class TaskRun:
    task: TaskType
    chat: ChatRun
    splitter: ThinkingSplitter


class TaskService:
    """Runs task types through the chat service."""

    def __init__(self, prompts: TaskPrompts[Tier], chat: ChatService) -> None:
        self.prompts = prompts
        self.chat = chat

    async def prepare(
        self, task_id: str, request: TaskRunRequest, ticket_id: str | None = None
    ) -> tuple[TaskType, PreparedChat]:
        """``ticket_id``: the task is a ticket received from a peer, run under the ticket's
        id and never sent on to another peer."""
        arrived = time.perf_counter()
        prompts = self.prompts
        task = prompts.get(task_id)
        args = prompts.check_args(task, request.args)
        tier = prompts.tier_of(task)
        sampling = task.spec.sampling
        prepared = await self.chat.prepare_messages(
            tier,
            prompts.messages(task, args),
            sampling_arguments(
                args,
                SamplingParams(
                    max_tokens=sampling.max_tokens,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    grammar=task_grammar(task),
                ),
            ),
            Priority.parse(request.priority or task.spec.priority, Priority.TASK),
            model_name=tier.name,
            chat_id=ticket_id,
            session=request.session,
            arrived=arrived,
            fields=FieldNames(grammar="task_type"),
            clamp_to_cap=True,
            ticket=TicketSpec(task.id, args) if ticket_id is None else None,
        )
        return task, prepared

    async def start(self, task: TaskType, prepared: PreparedChat) -> TaskRun:
        run = await self.chat.start(prepared)
        tag = task.spec.thinking.tag if task.spec.thinking else None
        return TaskRun(task, run, ThinkingSplitter(tag))

    async def deltas(self, run: TaskRun) -> AsyncGenerator[TaskDelta, None]:
        async with aclosing(self.chat.events(run.chat)) as events:
            async for event in events:
                for channel, text in run.splitter.feed(event.text):
                    yield TaskDelta(type=f"{channel}.delta", delta=text)  # type: ignore[arg-type]
        for channel, text in run.splitter.finish():
            yield TaskDelta(type=f"{channel}.delta", delta=text)  # type: ignore[arg-type]

    def result(self, run: TaskRun, event: bool = False) -> TaskResult:
        chat = run.chat
        finish = chat.finish_reason
        output_text = "".join(run.splitter.output)
        try:
            output = parse_output(output_text, run.task.output_schema, finish == "stop")
        except ValueError:  # cannot happen under the grammar; never a 500 if it does
            output, finish = None, "length"
        thinking = "".join(run.splitter.thinking).strip() if run.task.spec.thinking else None
        cls = TaskResultEvent if event else TaskResult
        return cls(
            id=chat.chat.id.replace("chatcmpl-", "task-"),
            task_type=run.task.id,
            model=chat.chat.model_name,
            output=output,
            thinking=thinking,
            finish_reason=finish,  # type: ignore[arg-type]
            usage=chat.usage(),
        )

    async def complete(self, run: TaskRun) -> TaskResult:
        async with aclosing(self.deltas(run)) as deltas:
            async for _ in deltas:
                pass
        return self.result(run)


# Arguments that set sampling, where a task type declares them (the chat task does, so that
# a chat ticket carries the client's sampling as text).
SAMPLING_ARGUMENTS = ("max_tokens", "temperature", "top_p", "seed", "stop")


def sampling_arguments(args: dict[str, str], sampling: SamplingParams) -> SamplingParams:
    """``sampling`` with the values of the sampling arguments given (422 when malformed)."""
    changes: dict[str, Any] = {}
    for name in SAMPLING_ARGUMENTS:
        if name not in args:
            continue
        text = args[name]
        try:
            if name in ("max_tokens", "seed"):
                changes[name] = int(text)
            elif name == "stop":
                stops = json.loads(text)
                if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
                    raise ValueError("not a JSON list of strings")
                if len(stops) > MAX_STOP_SEQUENCES:  # as on /v1/chat/completions
                    raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
                changes[name] = tuple(stops)
            else:
                changes[name] = float(text)
                if not math.isfinite(changes[name]):  # "nan" passes every bound check
                    raise ValueError(f"not a finite number: {shorten(text)}")
        except ValueError as exc:
            raise UnprocessableError(
                f"argument {name!r} is malformed: {shorten(str(exc))}", param=f"args.{name}"
            ) from None
    bounds = {"max_tokens": (1, None), "temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}
    for name, (low, high) in bounds.items():
        value = changes.get(name)
        if value is not None and (value < low or (high is not None and value > high)):
            raise UnprocessableError(
                f"argument {name!r} is out of range: {value}", param=f"args.{name}"
            )
    return replace(sampling, **changes) if changes else sampling

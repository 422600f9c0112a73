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
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from gateway.errors import UnprocessableError
from gateway.protocol.openai import MAX_STOP_SEQUENCES, shorten
from gateway.protocol.tasks import (
    TaskDelta,
    TaskResult,
    TaskResultEvent,
    TaskRunRequest,
)
from gateway.seam.backend import Priority, SamplingParams, TicketSpec
from gateway.serving.chat import (
    ChatRequest,
    ChatRun,
    ChatService,
    FieldNames,
    PreparedChat,
    plain_finish,
)
from gateway.serving.openai_chat import openai_usage
from gateway.serving.tiers import Tier
from gateway.tasks.catalogue import TaskPrompts
from gateway.tasks.definitions import TaskType
from gateway.tasks.thinking import Channel, ThinkingSplitter, parse_output, task_grammar

T = TypeVar("T")

# Each channel of a task's reply as the type of its streamed event.
DELTA_TYPES: dict[Channel, Literal["thinking.delta", "output.delta"]] = {
    "thinking": "thinking.delta",
    "output": "output.delta",
}


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
        own = SamplingParams(
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            grammar=task_grammar(task),
        )
        prepared = await self.chat.prepare(
            ChatRequest(
                tier,
                prompts.messages(task, args),
                sampling_arguments(args, own),
                Priority.parse(request.priority or task.spec.priority, Priority.TASK),
                model_name=tier.name,
                chat_id=ticket_id,
                session=request.session,
                arrived=arrived,
                fields=FieldNames(grammar="task_type"),
                clamp_to_cap=True,
                ticket=TicketSpec(task.id, args) if ticket_id is None else None,
            )
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
                    yield TaskDelta(type=DELTA_TYPES[channel], delta=text)
        for channel, text in run.splitter.finish():
            yield TaskDelta(type=DELTA_TYPES[channel], delta=text)

    def result(self, run: TaskRun, event: bool = False) -> TaskResult:
        chat = run.chat
        finish = plain_finish(chat.finish_reason)
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
            finish_reason=finish,
            usage=openai_usage(chat.usage()),
        )

    async def complete(self, run: TaskRun) -> TaskResult:
        async with aclosing(self.deltas(run)) as deltas:
            async for _ in deltas:
                pass
        return self.result(run)


def sampling_arguments(args: dict[str, str], sampling: SamplingParams) -> SamplingParams:
    """``sampling`` with the values of the sampling arguments given (422 when malformed):
    ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop`` and
    ``repetition_penalty``, where a task type
    declares them (the chat task does, so that a chat ticket carries the client's sampling
    as text)."""
    max_tokens = _argument(args, "max_tokens", int)
    temperature = _argument(args, "temperature", _finite)
    top_p = _argument(args, "top_p", _finite)
    seed = _argument(args, "seed", int)
    stop = _argument(args, "stop", _stops)
    repetition = _argument(args, "repetition_penalty", _finite)
    _check_range("max_tokens", max_tokens, 1, None)
    _check_range("temperature", temperature, 0.0, 2.0)
    _check_range("top_p", top_p, 0.0, 1.0)
    _check_range("repetition_penalty", repetition, 1e-6, 2.0)
    if all(value is None for value in (max_tokens, temperature, top_p, seed, stop, repetition)):
        return sampling
    return replace(
        sampling,
        max_tokens=sampling.max_tokens if max_tokens is None else max_tokens,
        temperature=sampling.temperature if temperature is None else temperature,
        top_p=sampling.top_p if top_p is None else top_p,
        seed=sampling.seed if seed is None else seed,
        stop=sampling.stop if stop is None else stop,
        repetition_penalty=sampling.repetition_penalty if repetition is None else repetition,
    )


def _argument(args: dict[str, str], name: str, parse: Callable[[str], T]) -> T | None:
    """The argument ``name`` parsed, if it was given (422 when malformed)."""
    if name not in args:
        return None
    try:
        return parse(args[name])
    except ValueError as exc:
        raise UnprocessableError(
            f"argument {name!r} is malformed: {shorten(str(exc))}", param=f"args.{name}"
        ) from None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "nan" passes every bound check
        raise ValueError(f"not a finite number: {shorten(text)}")
    return value


def _stops(text: str) -> tuple[str, ...]:
    stops = json.loads(text)
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ValueError("not a JSON list of strings")
    if len(stops) > MAX_STOP_SEQUENCES:  # as on /v1/chat/completions
        raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
    return tuple(stops)


def _check_range(name: str, value: float | None, low: float, high: float | None) -> None:
    if value is not None and (value < low or (high is not None and value > high)):
        raise UnprocessableError(
            f"argument {name!r} is out of range: {value}", param=f"args.{name}"
        )

"""The task catalogue: the loaded task types, their descriptions, argument checks and prompts.

What a task *is* lives here (``definitions`` reads the files, ``thinking`` shapes the output);
running one is the serving layer's job (``gateway.serving.tasks``), through the chat service.
The catalogue needs only to name the tier a task runs on, so it sees the tiers through
``TierLookup``, not the serving layer's registry.
"""

from __future__ import annotations

import json
from typing import Any, Generic, Protocol, TypeVar

from gateway.errors import NotFoundError, UnprocessableError
from gateway.protocol.openai import shorten
from gateway.protocol.tasks import TaskArgument, TaskTypeInfo, TaskTypeList
from gateway.seam.request_parts import ChatMessage
from gateway.tasks.definitions import TaskCatalog, TaskType

CHAT_ROLES = frozenset({"system", "user", "assistant"})


class NamedTier(Protocol):
    @property
    def name(self) -> str: ...


TierT = TypeVar("TierT", bound=NamedTier, covariant=True)


class TierLookup(Protocol[TierT]):
    """The tiers of this node by name (``gateway.serving.tiers.TierRegistry``)."""

    def tier_name_of(self, name: str) -> str | None: ...

    def resolve(self, name: str | None) -> TierT: ...


class TaskPrompts(Generic[TierT]):
    """The loaded task types: their descriptions, argument checks and conversations."""

    def __init__(self, catalog: TaskCatalog, registry: TierLookup[TierT]) -> None:
        self.catalog = catalog
        self.registry = registry

    # -- the catalogue -----------------------------------------------------------------------

    def get(self, task_id: str) -> TaskType:
        try:
            return self.catalog.tasks[task_id]
        except KeyError:
            shown = shorten(task_id)
            known = ", ".join(sorted(self.catalog.tasks))
            raise NotFoundError(
                f"no task type {shown!r}; known task types: {known}", param="task_type"
            ) from None

    def tier_of(self, task: TaskType) -> TierT:
        # A task naming a tier this node does not have runs on the default tier.
        name = task.spec.tier
        if name and self.registry.tier_name_of(name):
            return self.registry.resolve(name)
        return self.registry.resolve(None)

    def describe(self, task: TaskType) -> TaskTypeInfo:
        thinking = task.spec.thinking
        return TaskTypeInfo(
            id=task.id,
            description=task.spec.description,
            tier=self.tier_of(task).name,
            priority=task.spec.priority,
            arguments=[
                TaskArgument(
                    name=name,
                    required=spec.required,
                    max_length=spec.max_length,
                    description=spec.description,
                )
                for name, spec in task.arguments.items()
            ],
            output_schema=task.output_schema,
            thinking_tag=thinking.tag if thinking else None,
        )

    def catalogue(self) -> TaskTypeList:
        tasks = [self.describe(self.catalog.tasks[k]) for k in sorted(self.catalog.tasks)]
        return TaskTypeList(data=tasks, tasks_hash=self.catalog.hash)

    # -- prompts -----------------------------------------------------------------------------

    def check_args(
        self, task: TaskType, args: dict[str, Any], partial: bool = False
    ) -> dict[str, str]:
        """Arguments as the task declares them; 422 naming the first that is not."""
        for name, value in args.items():
            if name not in task.arguments:
                known = ", ".join(task.arguments) or "none"
                raise UnprocessableError(
                    f"task {task.id!r} has no argument {shorten(name)!r}; its arguments: {known}",
                    param=f"args.{shorten(name)}",
                )
            if not isinstance(value, str):
                raise UnprocessableError(
                    f"argument {name!r} must be a string, not {type(value).__name__}",
                    param=f"args.{name}",
                )
            limit = task.arguments[name].max_length
            if len(value) > limit:
                raise UnprocessableError(
                    f"argument {name!r} has {len(value)} characters; at most {limit}",
                    param=f"args.{name}",
                )
        if not partial:
            for name, spec in task.arguments.items():
                if spec.required and name not in args:
                    raise UnprocessableError(
                        f"task {task.id!r} needs the argument {name!r}", param=f"args.{name}"
                    )
        return dict(args)

    def messages(self, task: TaskType, args: dict[str, str]) -> tuple[ChatMessage, ...]:
        """The task's conversation: the static part, then the arguments."""
        head = self._static_head(task)
        if task.spec.messages_argument:
            return (*head, *self._chat_messages(task.spec.messages_argument, args))
        return (*head, {"role": "user", "content": task.dynamic_text(args)})

    @staticmethod
    def _static_head(task: TaskType) -> list[ChatMessage]:
        static = task.static_text()
        return [{"role": "system", "content": static}] if static.strip() else []

    @staticmethod
    def _chat_messages(name: str, args: dict[str, str]) -> list[ChatMessage]:
        try:
            messages = json.loads(args[name])
        except ValueError as exc:
            raise UnprocessableError(
                f"argument {name!r} is not JSON: {exc}", param=f"args.{name}"
            ) from None
        ok = (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict)
                and m.get("role") in CHAT_ROLES
                and isinstance(m.get("content"), str)
                and set(m) <= {"role", "content"}
                for m in messages
            )
        )
        if not ok:
            raise UnprocessableError(
                f"argument {name!r} must be a JSON list of {{role, content}} messages with "
                "roles system, user or assistant",
                param=f"args.{name}",
            )
        return [{"role": m["role"], "content": m["content"]} for m in messages]

    def hint_messages(self, task: TaskType, args: dict[str, str]) -> tuple[ChatMessage, ...]:
        """What a typing hint can warm: the static part, and the rest if every required
        argument is known (the hint then covers the whole prompt)."""
        args = self.check_args(task, args, partial=True)
        complete = all(n in args for n, s in task.arguments.items() if s.required)
        # Not messages(task, {}): a chat task's messages argument would be missing (a 500).
        messages = self.messages(task, args) if complete else tuple(self._static_head(task))
        if not messages:
            raise UnprocessableError(f"task {task.id!r} has no static part to warm", param="task")
        return messages

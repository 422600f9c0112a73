"""``/v1/tasks`` (gateway extension): list task types, run one by name with text arguments."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel

from gateway.protocol.tasks import TaskResult, TaskRunRequest, TaskTypeInfo, TaskTypeList
from gateway.routes.answer import WireFormat, answer, served_by
from gateway.routes.errors import ERROR_RESPONSES
from gateway.serving.chat import PreparedChat
from gateway.serving.tasks import TaskRun, TaskService
from gateway.tasks.definitions import TaskType


class TasksController(Controller):
    path = "/v1/tasks"
    tags = ["Task types (gateway extension)"]

    @get("", summary="List the task types (and the hash of their definitions)")
    async def list_tasks(self, tasks: NamedDependency[TaskService]) -> TaskTypeList:
        return tasks.prompts.catalogue()

    @get("/{task_type:str}", summary="One task type", responses=ERROR_RESPONSES)
    async def retrieve(
        self, task_type: FromPath[str], tasks: NamedDependency[TaskService]
    ) -> TaskTypeInfo:
        return tasks.prompts.describe(tasks.prompts.get(task_type))

    @post(
        "/{task_type:str}",
        status_code=200,
        summary="Run a task type",
        description=(
            "The task type decides the tier, sampling, prompt and output. `output` is the "
            "parsed JSON (JSON tasks) or the text; `thinking` the private thinking section. "
            "With `stream: true`: Server-Sent Events `thinking.delta` and `output.delta`, then "
            "a `task.result` event, then `data: [DONE]`."
        ),
        responses=ERROR_RESPONSES,
    )
    async def run(
        self,
        request: Request[Any, Any, Any],
        task_type: FromPath[str],
        data: JSONBody[TaskRunRequest],
        tasks: NamedDependency[TaskService],
    ) -> Response[Any]:
        return await answer(request, TaskRuns(tasks, task_type), data, data.stream)


@dataclass(frozen=True)
class TaskRuns(WireFormat[TaskRunRequest, tuple[TaskType, PreparedChat], TaskRun]):
    """A task type's runs for ``answer``: a stream opens once the task has started."""

    tasks: TaskService
    task_type: str

    async def prepare(self, data: TaskRunRequest) -> tuple[TaskType, PreparedChat]:
        return await self.tasks.prepare(self.task_type, data)

    async def start(self, prepared: tuple[TaskType, PreparedChat]) -> TaskRun:
        return await self.tasks.start(*prepared)

    async def complete(self, data: TaskRunRequest, run: TaskRun) -> TaskResult:
        return await self.tasks.complete(run)

    async def stream(self, data: TaskRunRequest, run: TaskRun) -> AsyncGenerator[BaseModel, None]:
        async with aclosing(self.tasks.deltas(run)) as deltas:
            async for delta in deltas:
                yield delta
        yield self.tasks.result(run, event=True)

    def headers(self, run: TaskRun | None) -> dict[str, str]:
        return served_by(run.chat if run else None)

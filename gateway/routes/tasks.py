"""``/v1/tasks`` (gateway extension): list task types, run one by name with text arguments."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel

from gateway.protocol.tasks import TaskRunRequest, TaskTypeInfo, TaskTypeList
from gateway.routes.chat import served_by
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.sse import ServerSentEvents
from gateway.serving.tasks import TaskRun, TaskService


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
        task, prepared = await tasks.prepare(task_type, data)
        try:
            run = await unless_disconnected(request, tasks.start(task, prepared))
            headers = served_by(run.chat)
            if data.stream:
                return ServerSentEvents(_stream(tasks, run), headers=headers)
            result = await unless_disconnected(request, tasks.complete(run))
        except ClientDisconnected:
            return Response(content=None, status_code=499)
        return Response(result, headers=headers)


async def _stream(tasks: TaskService, run: TaskRun) -> AsyncGenerator[BaseModel, None]:
    async with aclosing(tasks.deltas(run)) as deltas:
        async for delta in deltas:
            yield delta
    yield tasks.result(run, event=True)

"""Two task types (one with thinking and a JSON output on the "slow" tier, one chat task
whose conversation is an argument) and a scripted backend, for tests of the task service and
of the peers' inbox that runs tickets through it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path

from gateway.metrics import GatewayMetrics
from gateway.seam.backend import BackendEvent, Finished, GenerationRequest, Started, TokenEvent
from gateway.serving.chat import ChatService
from gateway.serving.hints import HintService
from gateway.serving.tasks import TaskService
from gateway.serving.tiers import Tier, TierRegistry
from gateway.tasks.catalogue import TaskPrompts
from gateway.tasks.definitions import TaskCatalog
from tests.unit.fake_backend import FakeBackend, FakeTypingGates

VERDICT = """
priority = "background"
tier = "slow"
[sampling]
max_tokens = 200
temperature = 0.0
[arguments.answer]
max_length = 20
[arguments.note]
required = false
[thinking]
tag = "review"
checklist = ["Read it."]
[output]
type = "json"
schema = '{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}'
[templates]
static = "Judge the answer."
dynamic = "Answer: {{ answer }}"
"""
CHAT = """
messages_argument = "messages"
tier = "nowhere"
[arguments.messages]
[arguments.temperature]
required = false
[templates]
static = ""
"""


class ScriptedBackend(FakeBackend):
    """Answers the pieces of ``answer`` in order, then stops (or runs out of tokens), or
    raises ``error`` after the first piece."""

    answer: tuple[str, ...] = ("<review>", "fine", "</review>\n", '{"ok": ', "true}")
    finish = "stop"
    error: Exception | None = None

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        prompt = len(request.prompt.tokens or ())
        yield Started(prompt, 0)
        for index, text in enumerate(self.answer):
            yield TokenEvent(text, (index,))
            if self.error is not None:
                raise self.error
        yield Finished(self.finish, prompt, len(self.answer))  # type: ignore[arg-type]


def make_task_service(tmp_path: Path) -> tuple[TaskService, dict[str, ScriptedBackend]]:
    (tmp_path / "verdict.toml").write_text(VERDICT)
    (tmp_path / "chat.toml").write_text(CHAT)
    backends = {name: ScriptedBackend(name) for name in ("fast", "slow")}
    for backend in backends.values():
        backend.capabilities = replace(backend.capabilities, structured_output=True)
    tiers = {name: Tier(name, backend, 0) for name, backend in backends.items()}
    registry = TierRegistry(tiers, {}, "fast")  # type: ignore[arg-type]
    metrics = GatewayMetrics()
    hints = HintService(registry, metrics.hints, 60, gates=FakeTypingGates())
    chat = ChatService(registry, metrics.generation, hints)
    return TaskService(TaskPrompts(TaskCatalog.load([tmp_path]), registry), chat), backends

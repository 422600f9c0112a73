"""Task types: one file each in ``prompts/`` (TOML settings + Jinja2 templates).

A caller names a task type and gives text arguments; everything else (tier, priority,
sampling, the whole prompt, the output's shape) comes from the definition. That is what lets
a peer run a ticket it receives: every node derives the same prompt from the same files,
which the definitions' hash lets nodes check.

A file ``prompts/<id>.toml``::

    description = "..."
    tier = "fast"                 # optional: the default tier
    priority = "task"             # user | task | background
    messages_argument = "..."     # optional: this argument is a JSON list of chat messages
    [sampling]                    # temperature, max_tokens
    [arguments.<name>]            # required (true), max_length (characters), description
    [thinking]                    # optional: tag (not "think"), checklist, max_chars
    [output]                      # type = "text" | "json"; schema = a JSON Schema as text
    [templates]                   # static (no arguments), dynamic (the arguments)

The *static* template is the system message: it sees no arguments, so it renders to the same
bytes on every call and its KV cache stays in the prefix store. The *dynamic* template is the
user message. With a thinking section the model first writes, inside its private tag, the
checklist's analysis and a draft; the grammar bounds that section and then forces the output.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jinja2 import StrictUndefined, TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.seam.grammar import strict_objects

# The project's own task types ship inside the package (package data, so a wheel has them);
# the top-level prompts/ of a checkout is a link to this folder.
BUILTIN_PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
DEFAULT_THINKING_CHARS = 600
# The tag is the model's private thinking section: a name of our own, never the model's
# own <think> (which clashed with small models' habits in the seed system).
TAG_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,31}$")
RESERVED_TAGS = frozenset({"think", "thinking"})
_templates = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)


class TaskDefinitionError(ValueError):
    """A task file cannot be used; the message names the file and the problem."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArgumentSpec(_Section):
    required: bool = True
    max_length: int = Field(8000, ge=1, le=1_000_000)
    description: str = ""


class SamplingSpec(_Section):
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(512, ge=1)
    top_p: float = Field(1.0, gt=0.0, le=1.0)


class ThinkingSpec(_Section):
    tag: str
    checklist: list[str] = Field(min_length=1)
    max_chars: int = Field(DEFAULT_THINKING_CHARS, ge=16, le=20_000)

    @field_validator("tag")
    @classmethod
    def _check_tag(cls, tag: str) -> str:
        if not TAG_PATTERN.match(tag) or tag.lower() in RESERVED_TAGS:
            raise ValueError(f"tag {tag!r}: letters, digits, _ and -, and not <think>")
        return tag


class OutputSpec(_Section):
    type: Literal["text", "json"] = "text"
    schema_: str | None = Field(None, alias="schema")
    # Text only: bounds that keep a small model from rambling until max_tokens.
    max_chars: int | None = Field(None, ge=1, le=100_000)
    single_line: bool = False

    @model_validator(mode="after")
    def _check(self) -> OutputSpec:
        if self.type == "json":
            if not self.schema_:
                raise ValueError("output type 'json' needs a schema")
            json.loads(self.schema_)  # a ValueError names the position
        return self


class TemplateSpec(_Section):
    static: str
    dynamic: str = ""


class TaskFile(_Section):
    description: str = ""
    tier: str | None = None
    priority: Literal["user", "task", "background"] = "task"
    messages_argument: str | None = None
    sampling: SamplingSpec = SamplingSpec()
    arguments: dict[str, ArgumentSpec] = Field(default_factory=dict)
    thinking: ThinkingSpec | None = None
    output: OutputSpec = OutputSpec()
    templates: TemplateSpec


@dataclass(frozen=True)
class TaskType:
    """A loaded task type."""

    id: str
    spec: TaskFile
    path: Path
    output_schema: dict[str, Any] | None = field(default=None)

    @property
    def arguments(self) -> dict[str, ArgumentSpec]:
        return self.spec.arguments

    def static_text(self) -> str:
        """The system message: byte-identical on every call (no arguments)."""
        text = _templates.from_string(self.spec.templates.static).render()
        thinking = self.spec.thinking
        if thinking is None:
            return text
        steps = "\n".join(f"{n}. {step}" for n, step in enumerate(thinking.checklist, 1))
        answer = "the final answer as JSON" if self.output_schema else "the final answer"
        return (
            f"{text.rstrip()}\n\nFirst think privately inside <{thinking.tag}> and "
            f"</{thinking.tag}>, briefly, following this checklist:\n{steps}\n"
            f"Then close the tag and write {answer}."
        )

    def dynamic_text(self, args: dict[str, str]) -> str:
        values = {name: args.get(name, "") for name in self.arguments}
        return _templates.from_string(self.spec.templates.dynamic).render(**values)

    def canonical(self) -> dict[str, Any]:
        """What peers must agree on: the definition as data (aliases as written)."""
        return {"id": self.id, **self.spec.model_dump(mode="json", by_alias=True)}


def load_task(path: Path) -> TaskType:
    task_id = path.stem
    try:
        data = tomllib.loads(path.read_text())
        spec = TaskFile.model_validate(data)
        for template in (spec.templates.static, spec.templates.dynamic):
            _templates.parse(template)
        if spec.messages_argument and spec.messages_argument not in spec.arguments:
            raise ValueError(f"messages_argument {spec.messages_argument!r} is not an argument")
    except (
        OSError,
        tomllib.TOMLDecodeError,
        ValidationError,
        ValueError,
        TemplateSyntaxError,
    ) as exc:
        raise TaskDefinitionError(f"{path}: {exc}") from exc
    schema = json.loads(spec.output.schema_) if spec.output.schema_ else None
    return TaskType(task_id, spec, path, strict_objects(schema) if schema else None)


@dataclass(frozen=True)
class TaskCatalog:
    """Every task type found in the folders, and the hash of their definitions."""

    tasks: dict[str, TaskType]
    hash: str

    @classmethod
    def load(cls, folders: list[Path]) -> TaskCatalog:
        tasks: dict[str, TaskType] = {}
        for folder in folders:  # a later folder overrides an earlier one's task of that name
            for path in sorted(folder.glob("*.toml")):
                tasks[path.stem] = load_task(path)
        canonical = json.dumps([tasks[k].canonical() for k in sorted(tasks)], sort_keys=True)
        return cls(tasks, "sha256:" + hashlib.sha256(canonical.encode()).hexdigest())

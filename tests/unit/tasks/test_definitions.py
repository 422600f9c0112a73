"""Task type files: loading, checks, the static part and the definitions' hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.seam.grammar import grammar_text
from gateway.tasks.definitions import BUILTIN_PROMPTS, TaskCatalog, TaskDefinitionError, load_task
from gateway.tasks.thinking import ThinkingSplitter, parse_output, task_grammar

MINIMAL = '[templates]\nstatic = "Be brief."\ndynamic = "{{ text }}"\n[arguments.text]\n'


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_the_shipped_task_types_load_and_compile() -> None:
    catalog = TaskCatalog.load([BUILTIN_PROMPTS])
    assert {"summarize", "title", "extract_profile", "audit", "chat"} <= set(catalog.tasks)
    for task in catalog.tasks.values():
        grammar = task_grammar(task)
        if grammar is not None:
            assert grammar_text(grammar)  # llguidance accepts it
        assert task.static_text() == task.static_text()  # byte-identical: cacheable
    audit = catalog.tasks["audit"]
    assert audit.output_schema is not None
    assert audit.output_schema["additionalProperties"] is False
    assert "<review>" in audit.static_text()


def test_a_dropped_file_adds_or_overrides_a_task_and_changes_the_hash(tmp_path: Path) -> None:
    base = TaskCatalog.load([BUILTIN_PROMPTS])
    write(tmp_path, "mine", MINIMAL)
    extended = TaskCatalog.load([BUILTIN_PROMPTS, tmp_path])
    assert "mine" in extended.tasks and extended.hash != base.hash
    assert TaskCatalog.load([BUILTIN_PROMPTS, tmp_path]).hash == extended.hash  # stable


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[templates]\nstatic = '{{ oops'\n", "templates"),  # Jinja syntax
        ('[templates]\nstatic = ""\n[thinking]\ntag = "think"\nchecklist = ["x"]\n', "think"),
        ('[templates]\nstatic = ""\n[output]\ntype = "json"\n', "schema"),
        ('[templates]\nstatic = ""\nmessages_argument = "m"\n', "messages_argument"),
        ('[templates]\nstatic = ""\nsurprise = 1\n', "surprise"),
        ("not toml =", "toml"),
    ],
)
def test_bad_task_files_are_refused_naming_the_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = write(tmp_path, "bad", text)
    with pytest.raises(TaskDefinitionError) as refused:
        load_task(path)
    assert str(path) in str(refused.value)


def test_splitter_separates_thinking_and_output_across_token_boundaries() -> None:
    splitter = ThinkingSplitter("notes")
    text = '<notes>\nfirst </no thought</notes>\n\n{"a": 1}</notes>'
    pieces = [p for i in range(0, len(text), 2) for p in splitter.feed(text[i : i + 2])]
    pieces += splitter.finish()
    assert "".join(t for c, t in pieces if c == "thinking") == "\nfirst </no thought"
    assert "".join(t for c, t in pieces if c == "output") == '{"a": 1}'
    assert parse_output('{"a": 1}', {"type": "object"}, complete=True) == {"a": 1}
    assert parse_output('{"a": ', {"type": "object"}, complete=False) is None

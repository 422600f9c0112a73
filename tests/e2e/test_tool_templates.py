"""A chat template that knows tools renders them itself (no model run: the real tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

from mlx_lm.tokenizer_utils import TokenizerWrapper
from transformers import AutoTokenizer

from gateway.config import default_cache_dir
from gateway.engines.mlx_runner import MLXRunner, prefix_tokenizer_of
from gateway.modelstore.store import ModelStore
from gateway.seam.request_parts import ToolSpec
from gateway.seam.tool_format import CALL_OPEN, template_knows_tools

# A Hermes/Qwen-style template: functions in the system turn, calls and results its own way.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.name }} "
    "{{ c.function.arguments | tojson }}{% endfor %}{% else %}{{ m.content }}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = ToolSpec(
    "get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}}
)


def runner_with_template(template: str | None) -> MLXRunner:
    folder = ModelStore(default_cache_dir()).path_for("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(str(Path(folder)))  # a local folder: no download
    tokenizer.chat_template = template or (folder / "chat_template.jinja").read_text()
    runner = MLXRunner.__new__(MLXRunner)  # the tokenizer only: no weights are loaded
    runner.tokenizer = TokenizerWrapper(tokenizer)  # as mlx-lm's load wraps it
    runner.template_knows_tools = template_knows_tools(tokenizer.chat_template)
    runner.prefix_tokenizer = prefix_tokenizer_of(runner.tokenizer)  # as the runner tokenizes
    return runner


def decode(runner: MLXRunner, tokens: list[int]) -> str:
    return str(runner.tokenizer.decode(tokens))


HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "1", "content": "sunny"},
]


def test_a_template_that_knows_tools_gets_them_and_the_calls() -> None:
    runner = runner_with_template(TOOLS_TEMPLATE)
    assert runner.template_knows_tools
    text = decode(runner, runner.render_chat(HISTORY, tools=[WEATHER]))
    assert 'TOOLS:[{"function": {"description": "Weather"' in text or "TOOLS:" in text
    assert '"get_weather"' in text and 'CALL get_weather {"city": "Paris"}' in text
    assert "<|im_start|>tool\nsunny" in text
    assert CALL_OPEN not in text  # the template's own format, not the generic one


def test_smollm2s_template_gets_the_generic_format() -> None:
    runner = runner_with_template(None)
    assert not runner.template_knows_tools
    text = decode(runner, runner.render_chat(HISTORY, tools=[WEATHER]))
    assert "<tools>" in text and json.dumps("get_weather") in text
    assert f'{CALL_OPEN}{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text

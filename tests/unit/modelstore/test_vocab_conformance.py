"""llama.cpp's own tokenizer tests on the gateway's GGUF tokenizer: for every vocabulary of
the llama-cpp-python sdist (``make real-models``), every ``.inp`` text encodes to llama.cpp's
``.out`` ids (no BOS, special tokens not parsed), or the vocabulary is refused by name.
The table: ``ops/check_vocab_conformance.py`` -> ``ops/results/*-vocab-conformance.md``."""

from __future__ import annotations

import pytest

from gateway.modelstore.gguf.reader import read_gguf
from gateway.modelstore.gguf.tokenizer import build_tokenizer
from tests.real_fixtures import llama_cpp_cases, real_file, real_root

# The sdist's vocabularies (llama-cpp-python 0.3.36); a new one shows up in the table's run.
VOCABULARIES = [
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon",
    "gemma-4", "gpt-2", "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3",
    "qwen2", "qwen35", "refact", "starcoder",
]  # fmt: skip


def test_the_list_is_the_sdists() -> None:
    folder = real_file("llama.cpp/vocab")
    found = sorted(p.name[len("ggml-vocab-") : -len(".gguf")] for p in folder.glob("*.gguf"))
    assert found == VOCABULARIES


@pytest.mark.parametrize("name", VOCABULARIES)
def test_every_case_gives_llama_cpps_ids(name: str) -> None:
    gguf = real_file(f"llama.cpp/vocab/ggml-vocab-{name}.gguf")
    tokenizer = build_tokenizer(read_gguf(gguf).metadata)  # refusing would raise here
    cases = llama_cpp_cases(gguf)
    wrong = [
        (text, expected, got)
        for text, expected in cases
        if (got := tokenizer.encode(text, add_special_tokens=False)) != expected
    ]
    assert not wrong, f"{len(wrong)}/{len(cases)} differ, first: {wrong[0]}"


def test_an_unknown_pre_tokenizer_is_refused_by_name() -> None:
    meta = dict(read_gguf(real_root() / "llama.cpp/vocab/ggml-vocab-qwen2.gguf").metadata)
    meta["tokenizer.ggml.pre"] = "no-such-pre"
    with pytest.raises(ValueError, match="'no-such-pre'"):
        build_tokenizer(meta)

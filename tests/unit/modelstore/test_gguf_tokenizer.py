"""The tokenizer rebuilt from GGUF metadata encodes like the tokenizer the file was made from.

- byte-level BPE: SmolLM2's tokenizer.json (what the synthetic builder copies) written into a
  GGUF as llama.cpp does (tokens, types, merges, pre-tokenizer "smollm") and imported;
- SentencePiece: a small BPE model trained here with the ``sentencepiece`` library, written
  as llama.cpp's ``_set_vocab_sentencepiece`` does (tokens, scores, types, no merges), against
  sentencepiece's own encoding;
- the pre-tokenizer table: llama.cpp's names choose the right digit grouping.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.modelstore.gguf import convert_gguf
from gateway.modelstore.gguf.reader import read_gguf
from gateway.modelstore.gguf.tokenizer import build_tokenizer
from testsupport.synthetic import SyntheticSpec, build_synthetic
from testsupport.synthetic_gguf import write_gguf

TEXTS = [
    "The capital of France is Paris.",
    "Hello world! 123 4567 3.14159",
    "  multiple   spaces\n\n\ttabs and\r\nCRLF  ",
    "Café déjà vu — ünïcödé 日本語 🎉 Ελληνικά",
    "don't I'll we've they're",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "def f(x):\n    return x ** 2  # comment",
    "",
    " ",
    "a<|endoftext|>b",
]


def test_byte_level_bpe_matches_the_source_tokenizer(tmp_path: Path) -> None:
    from mlx_lm import load
    from transformers import AutoTokenizer

    folder = build_synthetic(
        SyntheticSpec("qwen2", hidden_size=32, intermediate_size=32, num_hidden_layers=1),
        tmp_path / "src",
    )
    gguf = write_gguf(folder, tmp_path / "m.gguf", "F32")
    convert_gguf(gguf, tmp_path / "out", lambda _msg: None)
    source = AutoTokenizer.from_pretrained(str(folder))
    imported = load(str(tmp_path / "out"))[1]
    for text in TEXTS:
        ids = source.encode(text, add_special_tokens=False)
        assert imported.encode(text, add_special_tokens=False) == ids, text
        assert imported.decode(ids) == source.decode(ids)
    assert imported.chat_template == source.chat_template
    assert imported.eos_token == "<|im_end|>"
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["eos_token_id"] == source.convert_tokens_to_ids("<|im_end|>")


def test_sentencepiece_matches_sentencepiece(tmp_path: Path) -> None:
    spm = pytest.importorskip("sentencepiece")
    from gguf import GGUFWriter

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(
            f"The {w} of {x} is a {w}{x} thing, said {x} {i} times."
            for i, w in enumerate(["capital", "river", "mountain", "city", "sea", "language"])
            for x in ["France", "Spain", "Italy", "Japan", "Egypt", "Peru", "Chile", "Kenya"]
        )
        * 3
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=340,
        model_type="bpe", byte_fallback=True, character_coverage=1.0,
        user_defined_symbols=["<tool>"], bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        # As Llama 2's and Mistral's models: no normalization, spaces kept as they are.
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    # What llama.cpp's _set_vocab_sentencepiece writes.
    tokens, scores, types = [], [], []
    for index in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(index))
        scores.append(sp.get_score(index))
        kind = 1
        if sp.is_unknown(index):
            kind = 2
        elif sp.is_control(index):
            kind = 3
        elif sp.is_byte(index):
            kind = 6
        elif sp.is_unused(index):
            kind = 5
        elif tokens[-1] == "<tool>":
            kind = 4
        types.append(kind)
    writer = GGUFWriter(str(tmp_path / "sp.gguf"), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_space_prefix(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tokenizer = build_tokenizer(read_gguf(tmp_path / "sp.gguf").metadata)
    for text in ["The capital of France is Paris.", "river Kenya 42 times", "Zürich ☃ 東京",
                 "two  spaces", " leading space", "end.\n"]:  # fmt: skip
        expected = sp.encode(text)
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text
        assert tokenizer.decode(expected) == sp.decode(expected)
    # After a user-defined token the text starts a new piece with its own dummy prefix, as in
    # llama.cpp (sentencepiece itself would not add one there).
    tool = tokens.index("<tool>")
    expected = [*sp.encode("a"), tool, *sp.encode("b")]
    assert tokenizer.encode("a<tool>b", add_special_tokens=False) == expected
    assert tokenizer.encode("Paris")[0] == 1  # SentencePiece models add <s>


@pytest.mark.parametrize(
    ("pre", "digits"),
    [("smollm", ["1", "2", "3", "4", "5"]), ("qwen2", ["1", "2", "3", "4", "5"]),
     ("llama-bpe", ["123", "45"])],
)  # fmt: skip
def test_pre_tokenizer_names_choose_the_digit_grouping(pre: str, digits: list[str]) -> None:
    alphabet = [chr(c) for c in range(33, 127)] + ["Ġ"]
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": [*alphabet, "12", "123", "45"],
        "tokenizer.ggml.merges": ["1 2", "12 3", "4 5"],
    }
    tokenizer = build_tokenizer(meta)
    ids = tokenizer.encode("12345", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(ids) == digits


def test_unknown_pre_tokenizer_is_refused() -> None:
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "klingon",
            "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": []}  # fmt: skip
    with pytest.raises(ValueError, match="klingon"):
        build_tokenizer(meta)

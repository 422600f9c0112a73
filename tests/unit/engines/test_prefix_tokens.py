"""Tokenizing a rendered conversation from where a recent one left off (issue 32) gives the
ids tokenizing it whole gives, on real tokenizers of four families (SmolLM2's, Gemma 3's,
Llama 3's and Qwen 3's), turn after turn, with texts that end and start at the cut points in
every way a template and a person can make them. Each test checks that ids were reused, so
that none passes with reuse silently off."""

from __future__ import annotations

import json
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from gateway.config import default_cache_dir
from gateway.engines.prefix_tokens import PrefixTokenizer
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from tests.real_fixtures import real_file

# Message texts chosen for the boundaries: spaces and newlines at either end, a word that
# a byte-level BPE would merge with what follows, non-ASCII, code, a literal marker typed
# by a person, an empty message.
TEXTS = [
    "Hello there",
    "  leading spaces and a trailing newline\n",
    "What's 12+30? Answer in one word",
    "déjà vu — naïve café 🙂",
    "def f(x):\n    return x  # comment\n\n",
    "ends with a space ",
    "",
    "a literal <|im_end|> and <end_of_turn> typed by a person",
    "\n\nstarts with newlines",
]


def smollm2() -> Any:
    return AutoTokenizer.from_pretrained(ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID))


def gemma3() -> Any:
    folder = ModelStore(default_cache_dir()).path_for("gemma-3-270m")
    return AutoTokenizer.from_pretrained(folder)


def from_fixture(name: str, eos: str, bos: str | None = None) -> Any:
    folder = real_file(f"tokenizers/{name}/tokenizer.json").parent
    config = json.loads((folder / "tokenizer_config.json").read_text())
    return PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"),
        chat_template=config.get("chat_template"),
        eos_token=eos,
        bos_token=bos,
    )


TOKENIZERS = {
    "smollm2": smollm2,
    "gemma3": gemma3,
    "llama3": lambda: from_fixture("llama3", "<|eot_id|>", "<|begin_of_text|>"),
    "qwen3": lambda: from_fixture("qwen3", "<|im_end|>"),
}


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def tokenizer(request: pytest.FixtureRequest) -> Any:
    made = TOKENIZERS[request.param]()
    if made.chat_template is None:
        pytest.fail(f"{request.param}: no chat template")
    return made


def render(tokenizer: Any, messages: list[dict[str, str]], *, open_reply: bool = True) -> str:
    text: str = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=open_reply
    )
    return text


def test_each_turn_of_a_conversation_tokenizes_as_whole(tokenizer: Any) -> None:
    prefix = PrefixTokenizer(tokenizer.backend_tokenizer)
    assert prefix.splits, "tokenizing at a special token's end should be exact here"
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are terse."}]
    for turn, text in enumerate(TEXTS):
        messages.append({"role": "user", "content": text})
        rendered = render(tokenizer, messages)
        whole = tokenizer.backend_tokenizer.encode(rendered, add_special_tokens=False).ids
        assert prefix.encode(rendered) == whole, (turn, text)
        # As transformers' own chat template tokenizing does it.
        templated = tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=True
        )
        assert whole == list(templated.get("input_ids", templated))
        messages.append({"role": "assistant", "content": TEXTS[-1 - turn]})
    assert prefix.reused_tokens > 0


def test_texts_that_diverge_early_share_late_or_repeat_are_exact(tokenizer: Any) -> None:
    prefix = PrefixTokenizer(tokenizer.backend_tokenizer)
    base = [{"role": "user", "content": "First question"}, {"role": "assistant", "content": "A"}]
    variants = [
        [*base, {"role": "user", "content": "Second"}],
        [*base, {"role": "user", "content": "Second, changed"}],  # same start, other end
        [{"role": "user", "content": "First questions"}],  # differs inside the first message
        [*base, {"role": "user", "content": "Second"}],  # sent again as it was
        [*base, {"role": "user", "content": "Second"}, {"role": "assistant", "content": ""}],
    ]
    for messages in variants:
        for open_reply in (True, False):
            rendered = render(tokenizer, messages, open_reply=open_reply)
            whole = tokenizer.backend_tokenizer.encode(rendered, add_special_tokens=False).ids
            assert prefix.encode(rendered) == whole, (messages, open_reply)
    # Cut anywhere inside a special token's text or right after it: still exact.
    rendered = render(tokenizer, variants[0])
    for end in range(len(rendered) - 1, max(len(rendered) - 40, 0), -1):
        text = rendered[:end] + "tail"
        whole = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
        assert prefix.encode(text) == whole, end
    assert prefix.reused_tokens > 0


def test_a_tokenizer_that_cannot_be_split_is_never_split() -> None:
    """A Metaspace tokenizer that adds a prefix space to the first text it is given (as a
    SentencePiece one may): tokenizing after a cut would add one there too. The probe finds
    it; encoding stays exact."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "\n": 2, "▁\n": 3, "▁": 4, "▁Hello,": 5, "Hello,": 6}
    spm = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    spm.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    spm.add_special_tokens([AddedToken("<s>", special=True, normalized=False)])
    prefix = PrefixTokenizer(spm)
    assert not prefix.splits
    for text in ("Hello,<s>\n Hello,", "Hello,<s>\n Hello,<s>\n", "<s>\n"):
        assert prefix.encode(text) == spm.encode(text, add_special_tokens=False).ids
    assert prefix.reused_tokens == 0

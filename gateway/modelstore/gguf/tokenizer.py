"""A Hugging Face fast tokenizer rebuilt from a GGUF file's ``tokenizer.*`` metadata.

Two tokenizer models cover the supported families:
- ``gpt2``: byte-level BPE (llama 3, qwen2/3, SmolLM). Vocabulary and merges are stored; what is
  not stored is the pre-tokenizer, which llama.cpp chooses by ``tokenizer.ggml.pre``
  (``src/llama-vocab.cpp``). The table below maps those names to the regexes of the models'
  own tokenizer.json files (llama.cpp's comments quote them), in the form those files use.
- ``llama``: SentencePiece (Llama 2, Mistral, Gemma). Tokens, scores and types are stored but no
  merges: they are derived from the vocabulary (every split of a token into two tokens, ranked
  by the merged token's score, as SentencePiece's BPE picks the best-scoring pair), with byte
  fallback. Gemma's vocabulary stores runs of spaces with real spaces; they are respelled "▁".
- ``gemma4``: a BPE over raw UTF-8 (not byte-level) with stored merges: spaces become "▁",
  the text is split only into lines and runs of newlines, unknown bytes fall back to <0xXX>.
- ``bert`` (WordPiece; llama.cpp writes a word's first piece "▁x" and the rest "x", where
  Hugging Face writes "x" and "##x"): BERT's normalizer (lower case, accents stripped unless
  the file says otherwise) and pre-tokenizer, each word greedily longest-first or [UNK].
- ``t5`` (Unigram; SentencePiece's scores and its precompiled normalization map).
Control tokens (type 3) are special; user-defined ones (type 4) are added tokens.
The vocabulary tests of llama.cpp itself (``ops/check_vocab_conformance.py``) give the same ids
for every file of its own set that has them (issue 31).
"""

from __future__ import annotations

from typing import Any

_NORMAL, _CONTROL, _USER_DEFINED, _BYTE = 1, 3, 4, 6
TOKENIZER_MODELS = ("gpt2", "llama", "gemma4", "bert", "t5")

_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    + _CONTRACTIONS
    + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    + _CONTRACTIONS
    + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's own lists (``src/llama-vocab.cpp``), applied one after the other, each splitting
# the pieces the one before left (as a Sequence of isolated Splits does).
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LLM = [
    "[\r\n]",
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    _CJK,
    "\\p{N}+",
]
_DEEPSEEK_CODER = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", _CJK, "\\p{N}"]
_FALCON = [
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
]
# tokenizer.ggml.pre -> (split regexes, none for GPT-2's own; digits split one by one first;
# ignore_merges: a word that is a whole token is taken as is, as llama 3 and tekken do).
_PRE: dict[str, tuple[list[str] | None, bool, bool]] = {
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), ([_LLAMA3], False, True)
    ),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), ([_QWEN2], False, False)),
    "qwen35": ([_QWEN35], False, False),
    "deepseek-llm": (_DEEPSEEK_LLM, False, False),
    "deepseek-coder": (_DEEPSEEK_CODER, False, False),
    "falcon": (_FALCON, False, False),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
        (None, True, False),
    ),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais", "default"), (None, False, False)),
    "tekken": ([_TEKKEN], False, True),
    **dict.fromkeys(("gpt-4o", "llama4"), ([_GPT4O], False, False)),
}


def _scalar(meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    return None if value is None else int(value)


def _byte_level_bpe(meta: dict[str, Any], tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if pre not in _PRE:
        raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}: known {', '.join(sorted(_PRE))}")
    regexes, digits, ignore_merges = _PRE[pre]
    merges = _merges(meta)
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=ignore_merges)
    )
    steps: list[Any] = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if regexes is None:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps += [
            pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in regexes
        ]
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _merges(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The stored merges, each split at its first space after the first character (as
    llama.cpp splits them: a merge's left part may itself begin with a space)."""
    out = []
    for merge in meta["tokenizer.ggml.merges"]:
        cut = merge.find(" ", 1)
        out.append((merge[:cut], merge[cut + 1 :]) if cut > 0 else (merge, ""))
    return out


def _gemma4_bpe(meta: dict[str, Any], tokens: list[str]) -> Any:
    """Gemma 4: BPE over raw UTF-8 with stored merges; spaces as "▁", split only into lines
    and runs of newlines, bytes without a token as <0xXX> (llama.cpp's ``GEMMA4`` case)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=_merges(meta), byte_fallback=True, fuse_unk=False)
    )
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.pre_tokenizer = pre_tokenizers.Split(
        Regex("[^\n]+|[\n]+"), behavior="isolated", invert=False
    )
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return tokenizer


def _wordpiece(meta: dict[str, Any], tokens: list[str], types: list[int]) -> tuple[Any, list[str]]:
    """BERT's WordPiece; the vocabulary respelled in Hugging Face's convention."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    spelled = [
        t if k == _CONTROL else (t[1:] if t.startswith("▁") else f"##{t}")
        for t, k in zip(tokens, types, strict=True)
    ]
    vocab: dict[str, int] = {}
    for index, token in enumerate(spelled):
        vocab.setdefault(token, index)
    unk_id = _scalar(meta, "tokenizer.ggml.unknown_token_id")
    unk = spelled[unk_id if unk_id is not None else 100]
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=1 << 30))
    lowercase = bool(meta.get("tokenizer.ggml.normalizer.lowercase", True))
    strip = bool(meta.get("tokenizer.ggml.normalizer.strip_accents", lowercase))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer, spelled


def _unigram(meta: dict[str, Any], tokens: list[str]) -> Any:
    """T5's Unigram: SentencePiece's scores, its precompiled normalization, "▁" for spaces."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    scores = [float(s) for s in meta["tokenizer.ggml.scores"]]
    unk_id = _scalar(meta, "tokenizer.ggml.unknown_token_id")
    tokenizer = Tokenizer(models.Unigram(list(zip(tokens, scores, strict=True)), unk_id, False))
    steps: list[Any] = []
    charsmap = meta.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap is not None and len(charsmap):
        steps.append(normalizers.Precompiled(bytes(bytearray(charsmap))))
    if meta.get("tokenizer.ggml.remove_extra_whitespaces", True):
        steps.append(normalizers.Replace(Regex(" {2,}"), " "))
        steps.append(normalizers.Strip(left=True, right=True))
    tokenizer.normalizer = normalizers.Sequence(steps)
    prefix = "always" if meta.get("tokenizer.ggml.add_space_prefix", True) else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme=prefix)
    tokenizer.decoder = decoders.Metaspace("▁", prepend_scheme=prefix)
    return tokenizer


def _sentencepiece_bpe(meta: dict[str, Any], tokens: list[str], types: list[int]) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers

    # Space runs stored with real spaces (Gemma): the normalizer turns spaces into "▁".
    tokens = [t.replace(" ", "▁") if t and not t.strip(" ") else t for t in tokens]
    scores = meta.get("tokenizer.ggml.scores")
    score = (
        [float(s) for s in scores]
        if scores is not None
        else [-float(i) for i in range(len(tokens))]
    )
    vocab = {token: index for index, token in enumerate(tokens)}
    merges: list[tuple[float, int, str, str]] = []
    for index, (token, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind in (_CONTROL, _BYTE) or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                merges.append((-score[index], index, left, right))
    merges.sort()  # best-scoring merged token first, then the lower id
    unk_id = _scalar(meta, "tokenizer.ggml.unknown_token_id")
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=[(left, right) for _, _, left, right in merges],
            byte_fallback=True,
            unk_token=tokens[unk_id] if unk_id is not None else None,
            fuse_unk=True,
        )
    )
    # SentencePiece's dummy prefix (Llama 2, Mistral; Gemma's GGUF turns it off). Like
    # llama.cpp (and Hugging Face's legacy Llama tokenizers), the space goes before every
    # piece of text, also the first one after a special or user-defined token.
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    steps: list[Any] = [normalizers.Prepend("▁")] if prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    decode: list[Any] = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        decode.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(decode)
    return tokenizer, tokens


def _tokenizer_model(
    model: str, meta: dict[str, Any], tokens: list[str], types: list[int]
) -> tuple[Any, list[str], bool]:
    """The ``tokenizers`` model of a GGUF tokenizer type, the tokens as it spells them, and
    whether the added tokens are matched in the normalized text."""
    if model == "gpt2":
        return _byte_level_bpe(meta, tokens), tokens, False
    if model == "llama":
        tokenizer, tokens = _sentencepiece_bpe(meta, tokens, types)
        # Matched in the normalized text (Gemma: spaces already "▁"); with a dummy prefix
        # they are split out first, or the prefix would be put inside them.
        return tokenizer, tokens, not bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    if model == "gemma4":
        return _gemma4_bpe(meta, tokens), tokens, False
    if model == "bert":
        tokenizer, tokens = _wordpiece(meta, tokens, types)
        return tokenizer, tokens, False
    if model == "t5":
        return _unigram(meta, tokens), tokens, False
    raise ValueError(
        f"unsupported GGUF tokenizer model {model!r} ({', '.join(TOKENIZER_MODELS)} are)"
    )


def build_tokenizer(meta: dict[str, Any], chat_template: str | None = None) -> Any:
    """A ``PreTrainedTokenizerFast`` for the GGUF metadata ``meta`` (string arrays decoded).

    ``chat_template`` replaces the file's own (a base model's transcript template).
    """
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast

    model = str(meta.get("tokenizer.ggml.model", "gpt2"))
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    raw_types = meta.get("tokenizer.ggml.token_type")
    types = [int(t) for t in raw_types] if raw_types is not None else [_NORMAL] * len(tokens)
    tokenizer, tokens, normalized = _tokenizer_model(model, meta, tokens, types)
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, types, strict=True)
            if k == _CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=normalized)
            for t, k in zip(tokens, types, strict=True)
            if k == _USER_DEFINED
        ]
    )

    def token(key: str) -> str | None:
        index = _scalar(meta, key)
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    bos = token("tokenizer.ggml.bos_token_id")
    # SentencePiece models add <bos> unless told otherwise; byte-level ones do not; llama.cpp
    # always adds it for Gemma 4.
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", model == "llama")) or model == "gemma4"
    if add_bos and bos is not None:
        bos_id = tokens.index(bos)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, bos_id)]
        )
    template = chat_template if chat_template is not None else meta.get("tokenizer.chat_template")
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=bos,
        eos_token=token("tokenizer.ggml.eos_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        chat_template=template,
        clean_up_tokenization_spaces=False,
    )


# End-of-turn tokens llama.cpp also stops at when the file names none (``eot_token_id``).
_END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|eom_id|>", "<|end|>")


def stop_token_ids(meta: dict[str, Any]) -> list[int]:
    """eos plus the end-of-turn/end-of-message ids, for config.json's ``eos_token_id``."""
    ids: list[int] = []
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        value = _scalar(meta, f"tokenizer.ggml.{key}")
        if value is not None and value not in ids:
            ids.append(value)
    tokens = meta.get("tokenizer.ggml.tokens") or []
    types = meta.get("tokenizer.ggml.token_type")
    for index, text in enumerate(tokens):
        control = types is None or int(types[index]) == _CONTROL
        if text in _END_OF_TURN and index not in ids and control:
            ids.append(index)
    return ids

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
Control tokens (type 3) are special; user-defined ones (type 4) are added tokens.
"""

from __future__ import annotations

from typing import Any

_NORMAL, _CONTROL, _USER_DEFINED, _BYTE = 1, 3, 4, 6

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
# tokenizer.ggml.pre -> (split regex or None for GPT-2's own, digits split one by one first,
# ignore_merges: a word that is a whole token is taken as is, as llama 3 and tekken do).
_PRE: dict[str, tuple[str | None, bool, bool]] = {
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), (_LLAMA3, False, True)
    ),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), (_QWEN2, False, False)),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
        (None, True, False),
    ),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais", "default"), (None, False, False)),
    "tekken": (_TEKKEN, False, True),
    **dict.fromkeys(("gpt-4o", "llama4"), (_GPT4O, False, False)),
}


def _scalar(meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    return None if value is None else int(value)


def _byte_level_bpe(meta: dict[str, Any], tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if pre not in _PRE:
        raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}: known {', '.join(sorted(_PRE))}")
    regex, digits, ignore_merges = _PRE[pre]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=ignore_merges)
    )
    steps: list[Any] = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if regex is None:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps.append(pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False))
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
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
    if model == "gpt2":
        tokenizer = _byte_level_bpe(meta, tokens)
        normalized = False
    elif model == "llama":
        tokenizer, tokens = _sentencepiece_bpe(meta, tokens, types)
        # Matched in the normalized text (Gemma: spaces already "▁"); with a dummy prefix
        # they are split out first, or the prefix would be put inside them.
        normalized = not bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    else:
        raise ValueError(f"unsupported GGUF tokenizer model {model!r} (gpt2 and llama are)")
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
    # SentencePiece models add <bos> unless told otherwise; byte-level ones do not.
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", model == "llama"))
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

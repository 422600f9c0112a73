"""Tokenize a rendered conversation from where a recent one left off (issue 32).

Each turn of a chat sends the whole conversation again, and tokenizing it grows with its
length (SmolLM2's tokenizer on this CPU: ~1.3 µs a token, 9 ms for 7K tokens, ~45 ms for
32K), although only the new turn is new text. The template's text of a conversation starts
with the text of the conversation before (the same messages render the same), so the token
ids of a recent text can be reused up to a point where tokenizing in two parts gives what
tokenizing in one gives: the end of a special token (``<|im_end|>``, ``<end_of_turn>``).
Tokenizers split special tokens out before anything else and tokenize the text between them
on its own, so nothing merges across that point. Only the rest is tokenized.

The split is checked once per tokenizer on a probe text: a tokenizer for which it does not
hold (one that adds a prefix space to every segment it is given) is never split.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

MAX_TEXTS = 16  # recent texts kept: a few conversations' latest turns
# Enough text after the last cut that tokenizing it once and in two parts can differ.
PROBE_TAIL = " Hello, world!\n  It's 12:30 — déjà vu?\t"


@dataclass(frozen=True)
class EncodedText:
    """A text's ids and its cut points: (characters, tokens) at each special token's end."""

    text: str
    ids: list[int]
    cuts: list[tuple[int, int]]


class PrefixTokenizer:
    """``encode(text)``: the ids of ``text`` without special tokens added, as the tokenizer
    gives them, reusing those of the longest recent text it extends. Thread-safe (renders
    run on worker threads)."""

    def __init__(self, tokenizer: Any, max_texts: int = MAX_TEXTS) -> None:
        # ``tokenizer``: a ``tokenizers.Tokenizer`` (a fast Hugging Face tokenizer's own).
        self.tokenizer = tokenizer
        self.max_texts = max_texts
        self.cut_ids = _cut_ids(tokenizer)
        self._recent: OrderedDict[str, EncodedText] = OrderedDict()
        self._lock = threading.Lock()
        self.reused_tokens = 0  # ids taken from a recent text instead of tokenized (tests)
        self.splits = bool(self.cut_ids) and self._split_holds()

    def encode(self, text: str) -> list[int]:
        if not self.splits:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        start = self._longest_reusable(text)
        if start is None:
            encoded = self._encode(text, 0, 0)
        else:
            base, (chars, count) = start
            rest = self._encode(text[chars:], chars, count)
            encoded = EncodedText(
                text, base.ids[:count] + rest.ids, base.cuts[: _cuts_upto(base, chars)] + rest.cuts
            )
            self.reused_tokens += count
        self._remember(encoded)
        return list(encoded.ids)

    def _encode(self, text: str, chars: int, count: int) -> EncodedText:
        """``text`` tokenized alone, its cut points shifted by (chars, count)."""
        result = self.tokenizer.encode(text, add_special_tokens=False)
        ids: list[int] = result.ids
        cuts = [
            (chars + result.offsets[i][1], count + i + 1)
            for i, token in enumerate(ids)
            if token in self.cut_ids
        ]
        return EncodedText(text, ids, cuts)

    def _longest_reusable(self, text: str) -> tuple[EncodedText, tuple[int, int]] | None:
        """The recent text and cut point that cover the most of ``text``'s start (a cut
        before its very end: the rest must be tokenized, however short)."""
        best: tuple[EncodedText, tuple[int, int]] | None = None
        with self._lock:
            recent = list(self._recent.values())
        for encoded in recent:
            cut = _last_shared_cut(encoded, text)
            if cut is not None and (best is None or cut[0] > best[1][0]):
                best = (encoded, cut)
        return best

    def _remember(self, encoded: EncodedText) -> None:
        with self._lock:
            self._recent.pop(encoded.text, None)
            self._recent[encoded.text] = encoded
            while len(self._recent) > self.max_texts:
                self._recent.popitem(last=False)

    def _split_holds(self) -> bool:
        """Whether tokenizing at a cut point in two parts gives the ids of one part."""
        marker = self.tokenizer.id_to_token(min(self.cut_ids))
        for head in (f"{marker}", f"Hi{marker}", f" Hi\n{marker}"):  # each ends at a cut
            for tail in (PROBE_TAIL, f"\n{PROBE_TAIL}", f"{marker}{PROBE_TAIL}"):
                whole = self.tokenizer.encode(head + tail, add_special_tokens=False).ids
                parts = (
                    self.tokenizer.encode(head, add_special_tokens=False).ids
                    + self.tokenizer.encode(tail, add_special_tokens=False).ids
                )
                if whole != parts:
                    return False
        return True


def _cut_ids(tokenizer: Any) -> frozenset[int]:
    """Special tokens that are split out of the text as they are (not normalized, no
    whitespace stripped around them): the points where a text can be cut."""
    return frozenset(
        token_id
        for token_id, added in tokenizer.get_added_tokens_decoder().items()
        if added.special
        and not added.normalized
        and not (added.lstrip or added.rstrip or added.single_word)
    )


def _last_shared_cut(encoded: EncodedText, text: str) -> tuple[int, int] | None:
    """The last cut point of ``encoded`` up to which ``text`` is the same text, before
    ``text``'s end (binary search: a text that shares a longer start shares the shorter)."""
    low, high, found = 0, len(encoded.cuts), None
    while low < high:
        middle = (low + high) // 2
        chars = encoded.cuts[middle][0]
        if chars < len(text) and text.startswith(encoded.text[:chars]):
            found, low = encoded.cuts[middle], middle + 1
        else:
            high = middle
    return found


def _cuts_upto(encoded: EncodedText, chars: int) -> int:
    """How many of ``encoded``'s cut points are at or before ``chars``."""
    return bisect_right(encoded.cuts, (chars, len(encoded.ids) + 1))

"""Prompt lookup: draft tokens by finding the text's last few tokens earlier in the text.

An editor's rewrite repeats the code it was sent, an agent repeats file contents and tool
arguments, and a structured answer copies fields from its input: the continuation of the
latest earlier occurrence of the last ``n`` tokens (``n`` from ``MAX_NGRAM`` down to
``MIN_NGRAM``) is a good guess, and costs a dictionary lookup (llama.cpp's ``lookup``
example and vLLM's ``ngram`` proposer draft the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

# Longer matches are tried first: they are likelier to go on the same way. One token alone
# matches too often to predict anything.
MAX_NGRAM = 4
MIN_NGRAM = 2


class PromptLookup:
    """The n-grams of one generation's text (prompt, then output) and where each last ended.

    ``propose`` indexes what was added since its last call, so a long prompt costs its
    indexing once, after the first token (never before it).
    """

    method = "lookup"
    seconds_per_guess: float | None = None  # a lookup in the text costs next to nothing

    def __init__(self, reference: Sequence[int] = ()) -> None:
        # ``reference``: tokens the answer is expected to copy that are not in the prompt
        # (OpenAI's Predicted Outputs), looked up like the text itself but before it.
        self._reference = list(reference)
        self._index: dict[tuple[int, ...], int] = {}
        self._text: list[int] = []
        self._indexed = 0

    def finish(self) -> None:
        """Nothing outlives the generation: the next one indexes its own text."""

    def propose(self, history: Sequence[int], limit: int) -> list[int]:
        """Up to ``limit`` tokens expected after ``history`` (prompt and output so far)."""
        if limit <= 0:
            return []
        text = self._text
        if not text and self._reference:
            text.extend(self._reference)
            self._index_to(len(text))
        offset = len(self._reference)
        text.extend(history[len(text) - offset :])
        self._index_to(len(text))
        for n in range(min(MAX_NGRAM, len(history)), MIN_NGRAM - 1, -1):
            start = self._index.get(tuple(text[-n:]))
            if start is not None:
                return text[start : start + limit]
        return []

    def _index_to(self, end: int) -> None:
        """Index every n-gram that has a token after it, up to ``end``: the n-gram ending
        just before position ``i`` maps to ``i``, its latest continuation. The text's own
        last n-gram is left out until a token follows it (it would find itself)."""
        text, index = self._text, self._index
        for i in range(max(self._indexed, 1), end):
            for n in range(MIN_NGRAM, MAX_NGRAM + 1):
                if i >= n:
                    index[tuple(text[i - n : i])] = i
        self._indexed = max(self._indexed, end)

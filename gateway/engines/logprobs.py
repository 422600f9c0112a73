"""Log-probabilities of generated tokens, spelled as text and bytes for OpenAI's shapes.

A token can hold part of a UTF-8 character, so each one is reported with its exact bytes
(OpenAI's ``bytes``) and a text that is readable even when partial. Byte-level BPE
vocabularies (GPT-2's, SmolLM2's) spell each byte as one printable character; SentencePiece
ones (Gemma's) use ``▁`` for a space and ``<0xNN>`` for raw bytes.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import mlx.core as mx

from gateway.seam.backend import TokenChoice, TokenLogprob

_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
MAX_TOP_LOGPROBS = 20
# What OpenAI reports for a token that cannot be chosen (a grammar's mask makes it -inf,
# which JSON cannot carry).
IMPOSSIBLE_LOGPROB = -9999.0


@lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-to-printable-character table, inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    codes = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes, strict=True)}


class TokenSpeller:
    """Token ids to (text, bytes), and a generation step's log-probabilities to a choice."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._spelled: dict[int, tuple[str, bytes]] = {}

    def spell(self, token_id: int) -> tuple[str, bytes]:
        spelled = self._spelled.get(token_id)
        if spelled is None:
            spelled = self._spelled[token_id] = self._spell(token_id)
        return spelled

    def _spell(self, token_id: int) -> tuple[str, bytes]:
        piece = str(self.tokenizer.convert_ids_to_tokens(token_id))
        decoder = _byte_level_decoder()
        if match := _SPM_BYTE.fullmatch(piece):
            raw = bytes([int(match.group(1), 16)])
        elif all(ch in decoder for ch in piece):
            raw = bytes(decoder[ch] for ch in piece)
        else:
            raw = piece.replace("\u2581", " ").encode()
        return raw.decode("utf-8", errors="replace"), raw

    def logprob(self, token_id: int, value: float) -> TokenLogprob:
        text, raw = self.spell(token_id)
        return TokenLogprob(text, raw, max(value, IMPOSSIBLE_LOGPROB))

    def choice(self, token: int, logprobs: mx.array, top: int) -> TokenChoice:
        """The chosen token and the ``top`` most likely ones, from a step's log-probabilities
        (one vector over the vocabulary, as the sampler saw it)."""
        chosen_value = logprobs[token]
        if top <= 0:
            return TokenChoice(self.logprob(token, float(chosen_value.item())))  # type: ignore[arg-type]
        top = min(top, MAX_TOP_LOGPROBS, logprobs.shape[-1])
        best = mx.argpartition(-logprobs, top - 1)[:top]
        values = logprobs[best]
        order = mx.argsort(-values)
        best, values = best[order], values[order]
        mx.eval(chosen_value, best, values)  # one wait for the three, not one each
        chosen = self.logprob(token, float(chosen_value.item()))  # type: ignore[arg-type]
        ids: list[int] = best.tolist()  # type: ignore[assignment]
        scores: list[float] = values.tolist()  # type: ignore[assignment]
        alternatives = tuple(
            self.logprob(int(i), float(v)) for i, v in zip(ids, scores, strict=True)
        )
        return TokenChoice(chosen, alternatives)

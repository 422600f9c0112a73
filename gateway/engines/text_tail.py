"""A generation's text, token by token: a streaming detokenizer, then the stop strings.

mlx-lm's streaming detokenizers hold back the bytes of an unfinished character, and the
stop matcher holds back a tail that may still grow into a stop string; both are released
when the generation ends (``end``). What ``add`` returns is safe to send at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.engines.stops import StopMatcher


class TextTail:
    """The text each token adds to a generation, and the tail held back at its end."""

    def __init__(self, detokenizer: Any, stop: Iterable[str], *, continues_text: bool = False):
        self._detokenizer = detokenizer
        if continues_text:
            _keep_leading_space(detokenizer)
        self._stops = StopMatcher(list(stop))

    @property
    def matched(self) -> str | None:
        """The stop string that was reached, if one was."""
        return self._stops.matched

    def replay(self, tokens: Iterable[int]) -> None:
        """Take in tokens whose text was already sent (generated elsewhere), so that what
        follows is exactly the text that would have followed them."""
        for token in tokens:
            self.add(token)

    def add(self, token: int) -> tuple[str, bool]:
        """The text ``token`` adds that can be sent now, and whether a stop was reached."""
        self._detokenizer.add_token(token)
        return self._stops.feed(self._detokenizer.last_segment)

    def end(self) -> tuple[str, bool]:
        """Everything still held back, now that no token follows, and whether it reached a
        stop string (then the text stops before it)."""
        self._detokenizer.finalize()
        tail, stopped = self._stops.feed(self._detokenizer.last_segment)
        return tail + ("" if stopped else self._stops.flush()), stopped


def _keep_leading_space(detokenizer: Any) -> None:
    """mlx-lm's streaming detokenizers drop the first token's leading space (a chat reply
    does not begin with one); a raw text's continuation keeps it (" Paris" after "is")."""
    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer

    if isinstance(detokenizer, SPMStreamingDetokenizer):
        detokenizer.trim_space = False
    elif isinstance(detokenizer, BPEStreamingDetokenizer):
        # It trims only while its text is empty: start it with one character, not emitted.
        detokenizer.text = "\0"
        detokenizer.offset = 1

"""The reasoning section told apart from the answer, whatever the split of the text."""

from __future__ import annotations

from gateway.seam.reasoning import ReplyFormat
from gateway.seam.tool_format import Marker
from gateway.serving.reasoning import ReasoningSplitter

THINKS = ReplyFormat("required", Marker("<think>"), Marker("</think>"))


def split(reply: ReplyFormat, text: str, size: int) -> tuple[str, str]:
    splitter = ReasoningSplitter(reply)
    pieces = []
    for start in range(0, len(text), size):
        pieces.extend(splitter.feed(text[start : start + size]))
    pieces.extend(splitter.finish())
    reasoning = "".join(t for channel, t in pieces if channel == "reasoning")
    answer = "".join(t for channel, t in pieces if channel == "answer")
    return reasoning, answer


def test_a_section_at_the_start_is_reasoning_whatever_the_split() -> None:
    for size in (1, 2, 3, 7, 100):
        assert split(THINKS, "<think>\nweigh it</think>\n\nParis.", size) == (
            "\nweigh it",
            "Paris.",
        )


def test_a_prompt_that_opened_the_section_starts_inside() -> None:
    opened = ReplyFormat("opened", Marker("<think>"), Marker("</think>"))
    for size in (1, 4, 100):
        assert split(opened, "hmm</think>\n\nyes", size) == ("hmm", "yes")


def test_a_marker_later_in_the_answer_is_text() -> None:
    assert split(THINKS, "Paris. <think>x</think>", 1) == ("", "Paris. <think>x</think>")


def test_a_reply_cut_inside_the_section_is_all_reasoning() -> None:
    assert split(THINKS, "<think>still going </thi", 3) == ("still going </thi", "")


def test_a_model_without_markers_has_only_an_answer() -> None:
    assert split(ReplyFormat(), "<think>x</think>y", 2) == ("", "<think>x</think>y")


def test_in_reasoning_covers_the_markers_tokens() -> None:
    splitter = ReasoningSplitter(THINKS)
    seen = []
    for token in ["<think>", "a", "</think>", "\n\n", "b"]:
        before = splitter.in_reasoning
        splitter.feed(token)
        seen.append(before or splitter.in_reasoning)
    assert seen == [True, True, True, False, False]

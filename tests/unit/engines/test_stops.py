from __future__ import annotations

from gateway.engines.stops import StopMatcher


def run(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    out = ""
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out += text
        if stopped:
            return out, True
    return out + matcher.flush(), False


def test_no_stops_passes_text_through() -> None:
    assert run([], ["a", "b"]) == ("ab", False)


def test_stop_split_across_pieces_is_cut() -> None:
    assert run(["END"], ["hello E", "N", "D more"]) == ("hello ", True)


def test_partial_stop_is_released_when_it_cannot_match() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("hello EN") == ("hello ", False)
    assert matcher.feed("x") == ("ENx", False)


def test_earliest_of_several_stops_wins() -> None:
    assert run(["world", "lo"], ["hello world"]) == ("hel", True)


def test_held_back_tail_is_flushed_at_the_end() -> None:
    assert run(["STOP"], ["abc ST"]) == ("abc ST", False)
